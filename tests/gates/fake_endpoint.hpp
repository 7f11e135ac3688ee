// A small OpenAI-shaped HTTP server for tests: each request goes to a handler that decides what
// comes back, including the ways real servers go wrong (error documents, a connection closed
// before or during a reply, a stream cut off mid-way, silence).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::fake {

struct Reply {
  enum class Kind { whole, stream, close_now, stall };
  Kind kind = Kind::whole;
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;                       // whole
  std::vector<std::string> events;        // stream: each sent as "data: X\n\n" in its own chunk
  std::size_t drop_after = SIZE_MAX;      // stream: close the socket after this many events
  bool done = true;                       // stream: send "data: [DONE]" at the end
  std::chrono::milliseconds gap{0};       // stream: pause before each event
  std::chrono::milliseconds stall_for{0}; // stall: say nothing this long, then close

  static Reply json(const nlohmann::json& j, unsigned status = 200) {
    Reply r;
    r.status = status;
    r.body = j.dump();
    return r;
  }
  static Reply error(unsigned status, const std::string& message) {
    return json({{"error", {{"message", message}, {"type", "invalid_request_error"}, {"code", status}}}}, status);
  }
  static Reply text(const std::string& body, unsigned status = 200, const std::string& type = "text/plain") {
    Reply r;
    r.status = status;
    r.content_type = type;
    r.body = body;
    return r;
  }
  static Reply close() {
    Reply r;
    r.kind = Kind::close_now;
    return r;
  }
};

struct Request {
  std::string method;
  std::string target;
  std::string body;
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

using Handler = std::function<Reply(const Request&)>;

class Endpoint {
 public:
  explicit Endpoint(Handler handler);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  std::uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_.load(); }

  struct Impl;

 private:
  Handler handler_;
  std::uint16_t port_ = 0;
  std::atomic<int> requests_{0};
  std::unique_ptr<Impl> impl_;
};

// A chat completion document with one choice.
nlohmann::json chat_completion(const std::string& content, const std::string& finish_reason = "stop",
                               int prompt_tokens = 10, int completion_tokens = 5);

}  // namespace tandem::fake
