// The stage source as a worker's agent sees it: the head's agent at its fabric address, over
// mutual TLS with this node's own certificate (CN = node name, checked against the head's manifest).
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/agent/stage_source.hpp"
#include "tandem/manifest.hpp"
#include "tandem/net/http_client.hpp"
#include "tandem/net/pki.hpp"

namespace tandem::agentd {

class RemoteStageSource : public agent::StageSource {
 public:
  // `self`: this node's name (its certificate in `pki`); the source is `m`'s head.
  static Result<std::shared_ptr<RemoteStageSource>> create(const Manifest& m, const std::string& self,
                                                                   const net::PkiLayout& pki);
  std::string where() const override;
  Result<agent::SourceListing> list() override;
  Result<std::string> read(const agent::SourceFile& f, std::uint64_t offset, std::uint64_t length) override;

 private:
  RemoteStageSource(net::HttpsClient client, net::Endpoint ep) : client_(std::move(client)), ep_(std::move(ep)) {}
  Result<net::ClientResponse> get(const std::string& target, std::chrono::milliseconds timeout);
  // Kept connections, one per puller thread at a time: chunks of one file follow each other on
  // one TLS session instead of a handshake each.
  std::unique_ptr<net::KeptConnection> take();
  void give_back(std::unique_ptr<net::KeptConnection> c);
  net::HttpsClient client_;
  net::Endpoint ep_;
  std::mutex mu_;
  std::vector<std::unique_ptr<net::KeptConnection>> idle_;
};

}  // namespace tandem::agentd
