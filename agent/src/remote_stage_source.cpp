#include "remote_stage_source.hpp"

#include <thread>

#include "tandem/net/http_message.hpp"

namespace tandem::agentd {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// The head may hash a model of tens of GB before it can list it (once; then its cache answers).
constexpr auto kListTimeout = std::chrono::minutes(30);
// A chunk (at most 64 MiB) takes seconds even on a slow link; a cut link must not hold a pull
// for minutes before the retries (which fail fast while the route is gone) give up.
constexpr auto kChunkTimeout = std::chrono::seconds(30);
constexpr int kAttempts = 3;  // a transport failure (link flap) is retried; an HTTP answer is final

}  // namespace

Result<std::shared_ptr<RemoteStageSource>> RemoteStageSource::create(const Manifest& m, const std::string& self,
                                                                           const net::PkiLayout& pki) {
  net::ClientOptions o;
  o.ca_file = pki.ca_cert();
  o.cert_file = pki.node_cert(self);
  o.key_file = pki.node_key(self);
  o.response_limit = agent::kMaxStageRead + (1 << 20);
  auto c = net::HttpsClient::create(o);
  if (!c) return agent::plain_error("", "stage source client: " + c.error().message);
  // Over the fabric (the nodes' direct link), not the management network the controller uses;
  // fabric_address is the address when the manifest names no fabric.
  const Node& h = m.head();
  return std::shared_ptr<RemoteStageSource>(new RemoteStageSource(
      std::move(*c), net::Endpoint{h.fabric_address, static_cast<std::uint16_t>(h.agent_port), h.name}));
}

std::string RemoteStageSource::where() const {
  return "head " + ep_.node_name + " (" + ep_.host + ":" + std::to_string(ep_.port) + ")";
}

std::unique_ptr<net::KeptConnection> RemoteStageSource::take() {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return std::make_unique<net::KeptConnection>(client_, ep_);
}

void RemoteStageSource::give_back(std::unique_ptr<net::KeptConnection> c) {
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(c));
}

Result<net::ClientResponse> RemoteStageSource::get(const std::string& target, std::chrono::milliseconds timeout) {
  std::string last;
  auto conn = take();
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    auto r = conn->request("GET", target, {}, timeout);
    if (r) {
      give_back(std::move(conn));
      if (r->status == 200) return std::move(*r);
      std::string why = r->body;
      try {
        why = json::parse(r->body).value("error", r->body);
      } catch (const json::exception&) {
      }
      return agent::plain_error("", where() + ": " + std::to_string(r->status) + ": " + why);
    }
    last = r.error().message;
    if (attempt < kAttempts) std::this_thread::sleep_for(std::chrono::seconds(attempt));
  }
  return agent::plain_error("", where() + ": " + last);
}

Result<agent::SourceListing> RemoteStageSource::list() {
  auto r = get("/v1/stage/source/list", kListTimeout);
  if (!r) return r.error();
  try {
    return agent::SourceListing::from_json(json::parse(r->body));
  } catch (const json::exception& e) {
    return agent::plain_error("", where() + ": the listing is not JSON: " + e.what());
  }
}

Result<std::string> RemoteStageSource::read(const agent::SourceFile& f, std::uint64_t offset, std::uint64_t length) {
  auto r = get("/v1/stage/source/chunk?path=" + net::percent_encode(f.path) + "&offset=" + std::to_string(offset) +
                   "&length=" + std::to_string(length) + "&size=" + std::to_string(f.size) +
                   "&mtime_ns=" + std::to_string(f.mtime_ns),
               kChunkTimeout);
  if (!r) return r.error();
  if (r->content_type != "application/octet-stream")
    return agent::plain_error(f.path, where() + " answered a chunk with '" + r->content_type + "', not bytes");
  return std::move(r->body);
}

}  // namespace tandem::agentd
