// The demo model's chat template, in the GLM layout (role tokens, <think> blocks, tool calls as
// <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>) so that the glm45 and
// glm47 parsers and enable_thinking behave as they do with a real GLM checkpoint. Written for this
// project; transformers renders it with trim_blocks and lstrip_blocks, as our engine does.
#include "demo_assets.hpp"

namespace tandem::engine::serve {

std::string_view demo_chat_template() {
  return R"TMPL([gMASK]<sop>
{%- if tools %}
<|system|>
Functions you may call, one JSON description per line:
{% for tool in tools %}
{{ tool | tojson }}
{% endfor %}
To call one, answer with <tool_call>NAME<arg_key>ARGUMENT</arg_key><arg_value>VALUE</arg_value></tool_call>, with one key and value pair per argument.
{%- endif %}
{%- for m in messages %}
{%- if m.role == 'system' or m.role == 'developer' %}
<|system|>
{{ m.content }}
{%- elif m.role == 'user' %}
<|user|>
{{ m.content }}
{%- elif m.role == 'assistant' %}
<|assistant|>
{%- if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% else %}<think></think>{% endif %}
{%- if m.content %}
{{ m.content }}
{%- endif %}
{%- if m.tool_calls %}
{%- for call in m.tool_calls %}
<tool_call>{{ call.function.name }}
{%- for key, value in call.function.arguments.items() -%}
<arg_key>{{ key }}</arg_key><arg_value>{{ value if value is string else value | tojson }}</arg_value>
{%- endfor -%}
</tool_call>
{%- endfor %}
{%- endif %}
{%- elif m.role == 'tool' %}
<|observation|>
<tool_response>{{ m.content }}</tool_response>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<|assistant|>
{%- if enable_thinking is defined and not enable_thinking %}
<think></think>
{%- endif %}
{%- endif %})TMPL";
}

}  // namespace tandem::engine::serve
