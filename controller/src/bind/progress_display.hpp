// Progress of a bind or rollback, per node and step. On a terminal: finished steps scroll by and a
// live footer shows what each node is doing right now, with a running clock. Otherwise (a pipe, a
// log, CI): one plain line per event. With --output json, the lines go to stderr so stdout stays
// one JSON document for scripts.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem::ctl {

class Progress {
 public:
  enum class Mode { live, plain, quiet };
  // `nodes` fixes the footer's rows (in this order); `total` is the number of steps.
  Progress(Mode mode, std::FILE* out, std::vector<std::string> nodes, int total);
  ~Progress();
  static Mode pick(bool json_output, std::FILE* out);

  void begin(int index, const std::string& node, const std::string& action, const std::string& summary);
  void done(int index, const std::string& node, const std::string& action, const std::string& note, long long ms);
  void skipped(int index, const std::string& node, const std::string& action, const std::string& why);
  void failed(int index, const std::string& node, const std::string& action, const std::string& error);
  void note(const std::string& node, const std::string& text);  // live detail under the node's step
  void line(const std::string& text);                           // a message of its own
  // Prints `question` (the live footer held off meanwhile) and reads one line from `in`; false on
  // end of input. The answer is the line without its newline.
  bool ask(const std::string& question, std::FILE* in, std::string& answer);
  void finish();  // stops the live footer; further output is plain
  Mode mode() const { return mode_; }

 private:
  struct Row {
    std::string action, summary, note;
    std::chrono::steady_clock::time_point since;
    bool busy = false;
  };
  void print_locked(const std::string& text);
  void draw_footer_locked();
  void clear_footer_locked();
  std::string prefix(int index, const std::string& node, const std::string& action) const;

  Mode mode_;
  std::FILE* out_;
  std::vector<std::string> order_;
  std::map<std::string, Row> rows_;
  int total_;
  int footer_lines_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread ticker_;
};

}  // namespace tandem::ctl
