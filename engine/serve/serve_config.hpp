// What tandem-serve is asked to run: the settings of one rank, as plain data. The command line
// (engine/src/cli/serve_flags.hpp) fills it; serve/ reads it and never sees how it was spelled.
// Errors from serve/ and the layers below name a setting by its field name in backquotes
// (`max_model_len`); the command line maps those to its flags (cli/flag_names.hpp).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::engine {

struct ServeConfig {
  std::string model;
  std::string served_model_name;
  std::string host = "0.0.0.0";
  int port = 8000;
  bool trust_remote_code = false;
  std::string load_format = "auto";
  int tensor_parallel_size = 1;
  double gpu_memory_utilization = 0.9;
  int max_model_len = 0;
  int max_num_seqs = 256;
  int block_size = 16;
  std::string moe_backend = "auto";
  std::string speculative_config;  // JSON text
  std::string kv_cache_dtype = "auto";
  std::string kv_cache_memory;  // bytes or a size like 3GiB
  bool enforce_eager = false;
  bool enable_prefix_caching = true;
  // A model with a recurrent state: copies of it kept for prefix caching
  // (runtime::EngineConfig::prefix_state_copies; -1: its default).
  int prefix_state_copies = -1;
  // CUDA: a sequence's chunk of up to this many tokens takes the batch-invariant decode-sized
  // kernels, longer ones (prompt prefill) the fast ones in passes of their own
  // (model::CudaOptions::invariant_tokens, whose default this is; the model raises it to a
  // verification's 1 + k): greedy output with a drafter then equals plain greedy.
  int batch_invariant_tokens = 16;
  // CUDA: compute as a tensor-parallel group of this many ranks sums (model::CudaOptions::
  // reduction_groups), so one rank's greedy output equals TP-N's bit for bit. 0: 1 at one rank,
  // the group's size at N ranks (the only values a rank of a group takes).
  int reduction_groups = 0;
  std::string chat_template;
  std::string tool_call_parser;
  bool enable_auto_tool_choice = false;
  std::string reasoning_parser;
  std::string default_chat_template_kwargs;  // JSON object text
  std::string distributed_executor_backend = "mp";
  std::string device = "cuda";
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string rendezvous_timeout = "120s";
  std::string peer_timeout = "30s";  // a rank silent this long in a collective is lost
  std::string tp_transport = "auto";  // GPU ranks' device collectives: auto, nccl, host (nccl_communicator.hpp)
  bool headless = false;
  // The HTTP API's limits against slow, idle or greedy clients (durations and sizes as text).
  std::string http_header_timeout = "10s";
  std::string http_idle_timeout = "30s";
  std::string http_body_timeout = "60s";
  std::string max_request_body = "32MiB";
  int max_connections = 1024;
  int max_connections_per_client = 256;

  nlohmann::ordered_json to_json() const;
};

}  // namespace tandem::engine
