// One plain-HTTP GET with a deadline, for the controller's probes of the serving port
// (serve.wait: the head's /health; rollback.verify: the old lane's URL). Not the agent's mTLS API.
#pragma once
#include <chrono>
#include <string>

#include "tandem/result.hpp"

namespace tandem::ctl {

struct HttpAnswer {
  unsigned status = 0;
  std::string body;
};

// `url`: http://HOST:PORT/PATH (https is refused: the serving port speaks plain HTTP). An error
// value means no HTTP answer ("127.0.0.1:8888: connecting: Connection refused").
Result<HttpAnswer> http_get(const std::string& url, std::chrono::milliseconds timeout);

}  // namespace tandem::ctl
