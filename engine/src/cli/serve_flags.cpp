#include "cli/serve_flags.hpp"

#include "tandem/units.hpp"

namespace tandem::engine {

// long-function: one line per `vllm serve` flag; the whole flag table reads best in one place.
void add_serve_flags(CLI::App& app, ServeConfig& c) {
  app.add_option("model", c.model, "Hugging Face format model directory")->required();
  app.add_option("--served-model-name", c.served_model_name, "Name reported by /v1/models (default: the model path)");
  app.add_option("--host", c.host, "Address the HTTP API listens on");
  app.add_option("--port", c.port, "Port the HTTP API listens on")->check(CLI::Range(1, 65535));
  app.add_flag("--trust-remote-code", c.trust_remote_code, "Accepted for vLLM compatibility; no remote code is ever run");
  app.add_option("--load-format", c.load_format, "Weight format")->check(CLI::IsMember({"auto", "safetensors"}));
  app.add_option("--tensor-parallel-size", c.tensor_parallel_size, "Ranks the model is sharded over")
      ->check(CLI::Range(1, 64));
  app.add_option("--gpu-memory-utilization", c.gpu_memory_utilization, "Fraction of GPU memory the engine may use")
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--max-model-len", c.max_model_len, "Longest sequence (prompt + output) in tokens");
  app.add_option("--max-num-seqs", c.max_num_seqs, "Most sequences decoded together")->check(CLI::Range(1, 4096));
  app.add_option("--block-size", c.block_size, "Tokens per KV cache page")->check(CLI::Range(1, 65536));
  app.add_option("--moe-backend", c.moe_backend, "MoE expert GEMM back end")
      ->check(CLI::IsMember({"auto", "marlin", "triton", "cutlass"}));
  app.add_option("--speculative-config", c.speculative_config,
                 R"(Speculative decoding, JSON: {"method":"dflash","model":DIR,"num_speculative_tokens":N})");
  app.add_option("--kv-cache-dtype", c.kv_cache_dtype, "KV cache element type")
      ->check(CLI::IsMember({"auto", "bfloat16", "fp8_e4m3"}));
  app.add_option("--kv-cache-memory", c.kv_cache_memory, "Bytes for the KV pool (overrides the utilization share)");
  app.add_flag("--enforce-eager", c.enforce_eager, "Do not capture decode in CUDA graphs");
  app.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", c.enable_prefix_caching,
               "Share the KV of a prompt prefix an earlier request computed (on by default)");
  app.add_option("--prefix-state-copies", c.prefix_state_copies,
                 "A model with a recurrent state (glm5_next): copies of it kept for prefix caching, each taken at a "
                 "prompt's last block boundary, out of the KV budget (-1: one per --max-num-seqs up to 8, within an "
                 "eighth of the budget; 0: no prefix caching for such a model)")
      ->check(CLI::Range(-1, 4096));
  app.add_option("--batch-invariant-tokens", c.batch_invariant_tokens,
                 "CUDA: a sequence whose chunk in a step has at most this many tokens (at least 1 + the speculative "
                 "tokens) runs on the batch-invariant decode-sized kernels, so its result does not depend on what else "
                 "is in the step and greedy output with a drafter equals plain greedy output; longer chunks (prompt "
                 "prefill) run apart on cuBLASLt, fast, their rows depending on where a prompt is cut into chunks. "
                 "Raise it to make longer prompt chunks invariant too, at the cost of prefill speed")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--reduction-groups", c.reduction_groups,
                 "CUDA: sum each layer's output as a tensor-parallel group of this many ranks does (each rank's slice "
                 "computed apart, the partial sums added in rank order), so that a one-rank run is bit-identical to "
                 "a TP run of that size on the same device: what lets a TP1 run be compared bit for bit with TP-N "
                 "(N = 2; costs extra launches, and each group's KV rows). At --tensor-parallel-size N it is N, "
                 "the default there")
      ->check(CLI::Range(1, 64));
  app.add_option("--chat-template", c.chat_template, "Jinja chat template file (default: the model's)");
  app.add_option("--tool-call-parser", c.tool_call_parser, "Tool-call format in model output")
      ->check(CLI::IsMember({"glm45", "glm47"}));
  app.add_flag("--enable-auto-tool-choice", c.enable_auto_tool_choice, "Let the model decide when to call tools");
  app.add_option("--reasoning-parser", c.reasoning_parser, "Reasoning format in model output")
      ->check(CLI::IsMember({"glm45"}));
  app.add_option("--default-chat-template-kwargs", c.default_chat_template_kwargs,
                 R"(JSON object passed to every chat template render, e.g. {"enable_thinking":false})");
  app.add_option("--distributed-executor-backend", c.distributed_executor_backend, "Accepted for vLLM compatibility")
      ->check(CLI::IsMember({"mp"}));
  app.add_option("--device", c.device,
                 "Compute back end: cpu (the reference path; tensor parallel over TCP) or cuda (tensor parallel: "
                 "glm4_moe_lite; see --tp-transport)")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--tp-transport", c.tp_transport,
                 "GPU ranks' all-reduce: nccl (distinct GPUs), host (staged through host memory over the TCP group: "
                 "ranks sharing one GPU, a test transport that runs eager steps) or auto (host when two ranks report "
                 "the same GPU UUID, else nccl)")->check(CLI::IsMember({"auto", "nccl", "host"}));
  app.add_option("--nnodes", c.nnodes, "Number of nodes (one rank per node)")->check(CLI::Range(1, 64));
  app.add_option("--node-rank", c.node_rank, "This node's rank; 0 serves the API")->check(CLI::Range(0, 63));
  app.add_option("--master-addr", c.master_addr, "Address of rank 0 for the rendezvous");
  app.add_option("--master-port", c.master_port, "Rendezvous port on rank 0")->check(CLI::Range(1, 65535));
  app.add_option("--rendezvous-timeout", c.rendezvous_timeout,
                 "Give up the rendezvous after this long (e.g. 120s), instead of hanging");
  app.add_option("--peer-timeout", c.peer_timeout,
                 "A rank that stays silent this long inside a collective is taken as lost (e.g. 30s); an idle head "
                 "sends heartbeats, and a worker that hears nothing for a third of this gives up");
  app.add_flag("--headless", c.headless,
               "Run a worker rank: no API; --host/--port serve only GET /health, which answers once the rank has loaded "
               "its slice of the weights (then it dials --master-addr:--master-port)");
  auto* limits = "HTTP limits";
  app.add_option("--http-header-timeout", c.http_header_timeout,
                 "Close a new connection that has not sent its request line and headers within this (slowloris)")
      ->group(limits);
  app.add_option("--http-idle-timeout", c.http_idle_timeout,
                 "Close a kept-alive connection with no new request headers within this")
      ->group(limits);
  app.add_option("--http-body-timeout", c.http_body_timeout, "Close a connection whose request body takes longer")
      ->group(limits);
  app.add_option("--max-request-body", c.max_request_body, "Largest request body (bytes, or like 32MiB); beyond: 413")
      ->group(limits);
  app.add_option("--max-connections", c.max_connections, "Connections open at once; beyond: 503")
      ->check(CLI::Range(1, 1 << 20))
      ->group(limits);
  app.add_option("--max-connections-per-client", c.max_connections_per_client,
                 "Connections open at once from one client address; beyond: 503")
      ->check(CLI::Range(1, 1 << 20))
      ->group(limits);
}

std::vector<std::string> check_serve_config(const ServeConfig& c) {
  std::vector<std::string> errors;
  auto json_object = [&](const std::string& flag, const std::string& text) {
    if (text.empty()) return;
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) errors.push_back(flag + " must be a JSON object, got: " + text);
  };
  json_object("--speculative-config", c.speculative_config);
  json_object("--default-chat-template-kwargs", c.default_chat_template_kwargs);
  if (!c.speculative_config.empty()) {
    auto j = nlohmann::json::parse(c.speculative_config, nullptr, false);
    if (j.is_object()) {
      if (!j.contains("method") || j["method"] != "dflash")
        errors.push_back("--speculative-config: method must be \"dflash\"");
      if (!j.contains("model") || !j["model"].is_string())
        errors.push_back("--speculative-config: \"model\" (the drafter directory) is required");
      if (!j.contains("num_speculative_tokens") || !j["num_speculative_tokens"].is_number_integer())
        errors.push_back("--speculative-config: \"num_speculative_tokens\" (an integer) is required");
    }
  }
  if (c.node_rank >= c.nnodes)
    errors.push_back("--node-rank " + std::to_string(c.node_rank) + " must be below --nnodes " + std::to_string(c.nnodes));
  if (c.tensor_parallel_size % c.nnodes != 0)
    errors.push_back("--tensor-parallel-size " + std::to_string(c.tensor_parallel_size) + " is not a multiple of --nnodes " +
                     std::to_string(c.nnodes));
  if (c.reduction_groups > 0 && c.tensor_parallel_size > 1 && c.reduction_groups != c.tensor_parallel_size)
    errors.push_back("--reduction-groups " + std::to_string(c.reduction_groups) + " with --tensor-parallel-size " +
                     std::to_string(c.tensor_parallel_size) + ": a rank of a group sums as the group does; give " +
                     std::to_string(c.tensor_parallel_size) + " or leave it out");
  if (c.reduction_groups > 1 && c.device == "cpu")
    errors.push_back("--reduction-groups is for --device cuda: the CPU path's tensor-parallel sums already equal one rank's");
  if (c.headless && c.node_rank == 0) errors.push_back("--headless is for worker ranks; rank 0 serves the API");
  if (!c.kv_cache_memory.empty() && !parse_size(c.kv_cache_memory))
    errors.push_back("--kv-cache-memory '" + c.kv_cache_memory + "' is not a size (bytes, or like 3GiB)");
  if (!parse_duration(c.rendezvous_timeout))
    errors.push_back("--rendezvous-timeout '" + c.rendezvous_timeout + "' is not a duration (like 120s)");
  if (auto d = parse_duration(c.peer_timeout); !d || d->count() < 300)
    errors.push_back("--peer-timeout '" + c.peer_timeout + "' is not a duration of at least 300ms (like 30s)");
  for (const auto& [flag, text] : {std::pair{"--http-header-timeout", &c.http_header_timeout},
                                   std::pair{"--http-idle-timeout", &c.http_idle_timeout},
                                   std::pair{"--http-body-timeout", &c.http_body_timeout}})
    if (auto d = parse_duration(*text); !d || d->count() < 100)
      errors.push_back(std::string(flag) + " '" + *text + "' is not a duration of at least 100ms (like 10s)");
  if (auto n = parse_size(c.max_request_body); !n || *n < 1024 || *n > (std::uint64_t{1} << 32))
    errors.push_back("--max-request-body '" + c.max_request_body + "' is not a size from 1KiB to 4GiB (like 32MiB)");
  return errors;
}

}  // namespace tandem::engine
