// The official `openai` npm client against tandem-serve (OPENAI_BASE_URL): streaming chat, a
// non-streaming chat with tools, a forced tool call and a json_schema answer (constrained
// decoding), a completion, and errors surfacing as the client's APIError.
// The demo model's weights are random, so the checks are about shapes, not words.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(process.env.NODE_PATH + '/');
const OpenAI = require('openai').default ?? require('openai');
const client = new OpenAI({ apiKey: 'unused', baseURL: process.env.OPENAI_BASE_URL, maxRetries: 0 });

const models = await client.models.list();
assert.equal(models.data[0].id, 'tiny-glm');

// Streaming chat, with usage.
const stream = await client.chat.completions.create({
  model: 'tiny-glm',
  messages: [{ role: 'user', content: 'Say hello' }],
  max_tokens: 16,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
});
let text = '', finish = null, usage = null, chunks = 0, role = null;
for await (const chunk of stream) {
  chunks++;
  assert.equal(chunk.object, 'chat.completion.chunk');
  if (chunk.usage) usage = chunk.usage;
  const c = chunk.choices[0];
  if (!c) continue;
  if (c.delta.role) role = c.delta.role;
  text += (c.delta.content ?? '') + (c.delta.reasoning_content ?? '');
  if (c.finish_reason) finish = c.finish_reason;
}
assert.equal(role, 'assistant');
assert.ok(['stop', 'length'].includes(finish), `finish_reason ${finish}`);
assert.ok(usage && usage.completion_tokens >= 1 && usage.total_tokens === usage.prompt_tokens + usage.completion_tokens);
console.log(`streamed ${chunks} chunks, ${usage.completion_tokens} tokens, finish ${finish}`);

// Non-streaming chat with tools (the random model will rarely call one; the request must render
// the tools into the prompt and come back well-formed either way).
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const withTools = await client.chat.completions.create({
  model: 'tiny-glm',
  messages: [
    { role: 'user', content: 'Weather in Oslo?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 3}' },
    { role: 'user', content: 'And in Rome?' },
  ],
  tools,
  tool_choice: 'auto',
  max_tokens: 24,
  seed: 7,
});
const msg = withTools.choices[0].message;
assert.equal(msg.role, 'assistant');
assert.ok(typeof msg.content === 'string' || msg.tool_calls?.length > 0);
assert.ok(['stop', 'length', 'tool_calls'].includes(withTools.choices[0].finish_reason));
// The tool definitions went into the prompt: it is longer than the same chat without them.
assert.ok(withTools.usage.prompt_tokens > 60, `prompt_tokens ${withTools.usage.prompt_tokens}`);
console.log(`tools chat: finish ${withTools.choices[0].finish_reason}, prompt ${withTools.usage.prompt_tokens} tokens`);

// Forced tool call (tool_choice named): constrained decoding makes even random weights answer
// with arguments that parse and fit the tool's schema.
const forced = await client.chat.completions.create({
  model: 'tiny-glm',
  messages: [{ role: 'user', content: 'Weather in Oslo?' }],
  tools,
  tool_choice: { type: 'function', function: { name: 'get_weather' } },
  max_tokens: 48,
  seed: 3,
});
assert.equal(forced.choices[0].finish_reason, 'tool_calls');
const call = forced.choices[0].message.tool_calls[0];
assert.equal(call.type, 'function');
assert.equal(call.function.name, 'get_weather');
const args = JSON.parse(call.function.arguments);
assert.equal(typeof args.city, 'string');
assert.ok(forced.usage.completion_tokens <= 48);
console.log(`forced tool call: ${call.function.arguments.length} bytes of arguments`);

// The same, streamed: the client's chunks carry the call's header once, then argument pieces.
const forcedStream = await client.chat.completions.create({
  model: 'tiny-glm',
  messages: [{ role: 'user', content: 'Weather in Oslo?' }],
  tools,
  tool_choice: { type: 'function', function: { name: 'get_weather' } },
  max_tokens: 48,
  seed: 3,
  stream: true,
});
let streamedArgs = '', streamedName = null, streamedFinish = null;
for await (const chunk of forcedStream) {
  const c = chunk.choices[0];
  if (!c) continue;
  for (const tc of c.delta.tool_calls ?? []) {
    if (tc.function?.name) streamedName = tc.function.name;
    streamedArgs += tc.function?.arguments ?? '';
  }
  if (c.finish_reason) streamedFinish = c.finish_reason;
}
assert.equal(streamedName, 'get_weather');
assert.equal(streamedFinish, 'tool_calls');
assert.equal(streamedArgs, call.function.arguments);

// A JSON answer under a schema (response_format json_schema).
const schema = {
  type: 'object',
  properties: { answer: { type: 'string' }, score: { type: 'integer' }, tags: { type: 'array', items: { type: 'string' } } },
  required: ['answer', 'score'],
  additionalProperties: false,
};
const structured = await client.chat.completions.create({
  model: 'tiny-glm',
  messages: [{ role: 'user', content: 'Rate Oslo' }],
  response_format: { type: 'json_schema', json_schema: { name: 'rating', schema, strict: true } },
  max_tokens: 60,
  seed: 5,
});
assert.equal(structured.choices[0].finish_reason, 'stop');
const doc = JSON.parse(structured.choices[0].message.content);
assert.equal(typeof doc.answer, 'string');
assert.ok(Number.isInteger(doc.score));
assert.ok(Object.keys(doc).every((k) => k in schema.properties));
console.log(`json_schema answer: ${structured.choices[0].message.content.length} bytes`);

// An unsupported schema keyword is the client's BadRequestError, naming the keyword.
await assert.rejects(
  client.chat.completions.create({
    model: 'tiny-glm',
    messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '^a' } } },
  }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /pattern/.test(e.message));

const completion = await client.completions.create({ model: 'tiny-glm', prompt: 'Once', max_tokens: 4, ignore_eos: true });
assert.equal(completion.choices[0].finish_reason, 'length');

// Errors arrive as the client's typed errors.
await assert.rejects(
  client.chat.completions.create({ model: 'tiny-glm', messages: [{ role: 'user', content: 'x' }], temperature: 9 }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature');
await assert.rejects(
  client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
  (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
console.log('openai client: ok');
