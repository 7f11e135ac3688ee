#include "serve_config.hpp"

#include "tandem/units.hpp"

namespace tandem::engine {

// The settings as --print-config shows them: sizes and durations as numbers, JSON flags as JSON.
nlohmann::ordered_json ServeConfig::to_json() const {
  auto maybe_json = [](const std::string& text) -> nlohmann::ordered_json {
    if (text.empty()) return nullptr;
    return nlohmann::ordered_json::parse(text, nullptr, false);
  };
  return {{"model", model},
          {"served_model_name", served_model_name},
          {"host", host},
          {"port", port},
          {"trust_remote_code", trust_remote_code},
          {"load_format", load_format},
          {"tensor_parallel_size", tensor_parallel_size},
          {"gpu_memory_utilization", gpu_memory_utilization},
          {"max_model_len", max_model_len},
          {"max_num_seqs", max_num_seqs},
          {"block_size", block_size},
          {"moe_backend", moe_backend},
          {"speculative_config", maybe_json(speculative_config)},
          {"kv_cache_dtype", kv_cache_dtype},
          {"kv_cache_memory", kv_cache_memory.empty() ? nlohmann::ordered_json(nullptr)
                                                      : nlohmann::ordered_json(*parse_size(kv_cache_memory))},
          {"enforce_eager", enforce_eager},
          {"enable_prefix_caching", enable_prefix_caching},
          {"prefix_state_copies", prefix_state_copies},
          {"batch_invariant_tokens", batch_invariant_tokens},
          {"reduction_groups", reduction_groups},
          {"chat_template", chat_template},
          {"tool_call_parser", tool_call_parser},
          {"enable_auto_tool_choice", enable_auto_tool_choice},
          {"reasoning_parser", reasoning_parser},
          {"default_chat_template_kwargs", maybe_json(default_chat_template_kwargs)},
          {"distributed_executor_backend", distributed_executor_backend},
          {"device", device},
          {"nnodes", nnodes},
          {"node_rank", node_rank},
          {"master_addr", master_addr},
          {"master_port", master_port},
          {"rendezvous_timeout_ms", parse_duration(rendezvous_timeout) ? parse_duration(rendezvous_timeout)->count() : -1},
          {"peer_timeout_ms", parse_duration(peer_timeout) ? parse_duration(peer_timeout)->count() : -1},
          {"headless", headless},
          {"tp_transport", tp_transport},
          {"http_header_timeout_ms", parse_duration(http_header_timeout) ? parse_duration(http_header_timeout)->count() : -1},
          {"http_idle_timeout_ms", parse_duration(http_idle_timeout) ? parse_duration(http_idle_timeout)->count() : -1},
          {"http_body_timeout_ms", parse_duration(http_body_timeout) ? parse_duration(http_body_timeout)->count() : -1},
          {"max_request_body", parse_size(max_request_body) ? nlohmann::ordered_json(*parse_size(max_request_body))
                                                            : nlohmann::ordered_json(nullptr)},
          {"max_connections", max_connections},
          {"max_connections_per_client", max_connections_per_client}};
}

}  // namespace tandem::engine
