// From tandem-serve's flags to a running engine: check what this build can run (CPU device, one
// rank per process), join the tensor-parallel group, load the model directory (config.json, safetensors), tokenizer.json and the chat
// template, size the KV pool and start the engine. Every failure says what was being loaded.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "rank_group.hpp"
#include "serve_config.hpp"
#include "engine.hpp"
#include "tandem/comm/communicator.hpp"
#include "service.hpp"
#include "startup_phases.hpp"
#include "tandem/model/result.hpp"
#include "tandem/template/chat_template.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

namespace tandem::engine::serve {

struct Loaded {
  std::unique_ptr<comm::Communicator> group;  // first member: outlives the engine's model
  std::shared_ptr<model::DeviceAllReduce> device_all_reduce;  // GPU ranks' (rank_group.hpp); outlives it too
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<tmpl::ChatTemplate> chat_template;  // null when the model has none
  std::unique_ptr<runtime::Engine> engine;
  ServiceOptions options;
  // The start-up phases so far (also in options.startup, for /health); main marks "ready".
  std::shared_ptr<StartupPhases> startup;
};

// `log` gets the start-up lines (the KV pool line among them). With --nnodes > 1 this is rank 0:
// it loads its slice, waits for the worker ranks (rendezvous) and tells them the pool; `on_fatal`
// hears when the group is lost later.
// A headless worker rank's slice (--device cpu: host memory; cuda: the GPU), not joined yet.
tandem::Result<std::unique_ptr<model::Model>> load_worker_model(const ServeConfig& cfg, comm::Communicator& group);

// The KV blocks a worker rank's own flags allow (`kv_cache_memory`, or `gpu_memory_utilization`
// of its device now that its slice is loaded); the group takes the smallest (kv_agreement.hpp).
tandem::Result<std::int64_t> own_kv_blocks(const ServeConfig& cfg, const model::Model& model,
                                          const std::function<void(const std::string&)>& log);

tandem::Result<Loaded> load(const ServeConfig& cfg, const std::function<void(const std::string&)>& log,
                           std::function<void(const std::string&)> on_fatal = {});

}  // namespace tandem::engine::serve
