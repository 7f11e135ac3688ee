#include "generation.hpp"

#include <algorithm>

#include "service.hpp"

namespace tandem::engine::serve {

using oj = nlohmann::ordered_json;

namespace {
std::string reason_text(runtime::FinishReason r) {
  // model_len: the sequence reached max-model-len, which OpenAI reports as "length" too.
  return r == runtime::FinishReason::stop ? "stop" : "length";
}
}  // namespace

Generation::Generation(runtime::Engine& engine, const tokenizer::Tokenizer& tokenizer, GenerationSpec spec,
                       std::shared_ptr<api::Responder> responder)
    : engine_(engine), spec_(std::move(spec)), res_(std::move(responder)),
      decoder_(tokenizer, /*skip_special_tokens=*/true), stop_(spec_.stop) {
  const bool structured = spec_.structured.kind != api::StructuredKind::none;
  if (spec_.chat && spec_.stream && structured) structured_stream_.emplace(spec_.structured, tool_id_maker()());
  else if (spec_.chat && spec_.stream) chat_stream_.emplace(spec_.output, tool_id_maker());
}

std::optional<std::string> Generation::start(runtime::Engine& engine, const tokenizer::Tokenizer& tokenizer,
                                             runtime::GenerateRequest request, GenerationSpec spec,
                                             std::shared_ptr<api::Responder> responder) {
  auto g = std::make_shared<Generation>(engine, tokenizer, std::move(spec), std::move(responder));
  request.on_event = [g](const runtime::TokenEvent& e) { g->on_event(e); };
  // Held across submit: events for this request wait until the stream's first bytes are queued.
  std::lock_guard lk(g->mu_);
  auto id = engine.submit(std::move(request));
  if (!id) return id.error().message;
  g->id_ = id.value();
  if (g->spec_.stream) {
    g->res_->begin_stream("text/event-stream");
    if (g->spec_.chat) g->write_chunk(api::chat_chunk(g->spec_.meta, {{"role", "assistant"}, {"content", ""}}));
    else if (!g->spec_.echo.empty()) g->write_chunk(api::completion_chunk(g->spec_.meta, g->spec_.echo));
  }
  std::weak_ptr<Generation> weak = g;
  g->res_->on_close([weak] {
    if (auto self = weak.lock()) self->on_client_gone();
  });
  return std::nullopt;
}

void Generation::write_chunk(const oj& chunk) { res_->write(api::sse(chunk)); }

void Generation::on_client_gone() {
  std::lock_guard lk(mu_);
  if (done_) return;
  done_ = true;
  engine_.cancel(id_);  // its blocks go back to the pool now; the abort event finds us done
  count("abort");
}

void Generation::observe_token(const runtime::TokenEvent& e) {
  const auto now = std::chrono::steady_clock::now();
  if (spec_.metrics && last_step_ < 0)
    spec_.metrics->first_token(std::chrono::duration<double>(now - arrival_).count());
  else if (spec_.metrics && e.step != last_step_)
    spec_.metrics->inter_token(std::chrono::duration<double>(now - last_token_at_).count());
  if (last_step_ < 0) queue_seconds_ = e.queued_seconds;
  last_token_at_ = now;
  last_step_ = e.step;
}

void Generation::count(const std::string& outcome) {
  if (!spec_.metrics) return;
  FinishedRequest r;
  r.outcome = outcome;
  r.prompt_tokens = spec_.prompt_tokens;
  r.generation_tokens = completion_tokens_;
  r.e2e_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival_).count();
  r.queue_seconds = queue_seconds_;
  spec_.metrics->request_finished(r);
}

void Generation::on_event(const runtime::TokenEvent& e) {
  std::lock_guard lk(mu_);
  if (done_) return;
  draft_tokens_ = std::max(draft_tokens_, e.drafted);
  accepted_tokens_ = std::max(accepted_tokens_, e.accepted);
  if (e.token) {
    observe_token(e);
    ++completion_tokens_;
    take_text(decoder_.push(*e.token));
    if (stop_.stopped()) {
      engine_.cancel(id_);  // a stop string ended it; no need to compute more tokens
      return finish("stop");
    }
  }
  if (e.finish == runtime::FinishReason::none) return;
  if (e.finish == runtime::FinishReason::abort) {
    // Not our cancel (we would be done): the engine failed or is shutting down.
    return fail("error", e.error.empty() ? "the request was aborted: the server is shutting down" : e.error);
  }
  take_text(decoder_.finish());
  if (!stop_.stopped()) send_piece(stop_.finish());
  finish(stop_.stopped() ? "stop" : reason_text(e.finish));
}

void Generation::take_text(const std::string& decoded) {
  if (decoded.empty()) return;
  send_piece(stop_.feed(decoded));
}

void Generation::send_piece(const std::string& text) {
  if (text.empty()) return;
  if (!spec_.stream) {
    text_ += text;
    return;
  }
  if (!spec_.chat) return write_chunk(api::completion_chunk(spec_.meta, text));
  if (structured_stream_) {
    for (auto& d : structured_stream_->feed(text)) write_chunk(api::chat_chunk(spec_.meta, d));
    return;
  }
  for (auto& d : api::chat_deltas(chat_stream_->feed(text), next_tool_index_)) write_chunk(api::chat_chunk(spec_.meta, d));
}

void Generation::finish(const std::string& engine_reason) {
  done_ = true;
  const api::Usage usage{spec_.prompt_tokens, completion_tokens_, draft_tokens_, accepted_tokens_};
  // The outcome is counted before the answer leaves, so a client that reads /metrics right after
  // its response sees its own request.
  if (spec_.stream) {
    std::string reason = engine_reason;
    if (structured_stream_) {
      for (auto& d : structured_stream_->finish()) write_chunk(api::chat_chunk(spec_.meta, d));
      reason = structured_stream_->finish_reason(engine_reason);
      count(reason);
      write_chunk(api::chat_chunk(spec_.meta, oj::object(), reason));
      if (spec_.include_usage) write_chunk(api::chat_usage_chunk(spec_.meta, usage));
    } else if (chat_stream_) {
      for (auto& d : api::chat_deltas(chat_stream_->finish(), next_tool_index_)) write_chunk(api::chat_chunk(spec_.meta, d));
      reason = api::chat_finish_reason(engine_reason, chat_stream_->saw_tool_calls());
      count(reason);
      write_chunk(api::chat_chunk(spec_.meta, oj::object(), reason));
      if (spec_.include_usage) write_chunk(api::chat_usage_chunk(spec_.meta, usage));
    } else {
      count(reason);
      write_chunk(api::completion_chunk(spec_.meta, "", reason));
      if (spec_.include_usage) write_chunk(api::completion_usage_chunk(spec_.meta, usage));
    }
    res_->write(api::sse_done());
    res_->end();
  } else if (spec_.chat && spec_.structured.kind != api::StructuredKind::none) {
    const auto msg = api::assemble_structured(text_, spec_.structured, tool_id_maker()());
    const std::string reason = api::structured_finish_reason(text_, spec_.structured, engine_reason);
    count(reason);
    res_->send(200, "application/json", api::dump(api::chat_response(spec_.meta, msg, reason, usage)));
  } else if (spec_.chat) {
    auto msg = api::assemble_chat(text_, spec_.output, tool_id_maker());
    const std::string reason = api::chat_finish_reason(engine_reason, !msg.calls.empty());
    count(reason);
    res_->send(200, "application/json", api::dump(api::chat_response(spec_.meta, msg, reason, usage)));
  } else {
    count(engine_reason);
    res_->send(200, "application/json", api::dump(api::completion_response(spec_.meta, spec_.echo + text_, engine_reason, usage)));
  }
}

void Generation::fail(const std::string& outcome, const std::string& why) {
  done_ = true;
  api::ApiError e;
  e.status = 500;
  e.type = "internal_server_error";
  e.message = why;
  count(outcome);
  if (spec_.stream) {  // headers are gone already: the error travels as an event, as vLLM does
    res_->write(api::sse(oj(e.to_json())));
    res_->write(api::sse_done());
    res_->end();
  } else {
    res_->send(500, "application/json", e.body());
  }
}

}  // namespace tandem::engine::serve
