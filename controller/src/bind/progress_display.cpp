#include "progress_display.hpp"

#include <unistd.h>

#include <algorithm>

#include "tandem/utf8.hpp"

namespace tandem::ctl {
namespace {

std::string secs(long long ms) {
  char buf[32];
  if (ms < 1000) std::snprintf(buf, sizeof buf, "%lld ms", ms);
  else std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

// At most n bytes, "..." included (n > 3): a live line must not wrap.
std::string clip(const std::string& s, size_t n) { return s.size() <= n ? s : utf8::clip(s, n - 3); }

}  // namespace

Progress::Mode Progress::pick(bool json_output, std::FILE* out) {
  if (json_output) return Mode::plain;
  return ::isatty(::fileno(out)) ? Mode::live : Mode::plain;
}

Progress::Progress(Mode mode, std::FILE* out, std::vector<std::string> nodes, int total)
    : mode_(mode), out_(out), order_(std::move(nodes)), total_(total) {
  for (const auto& n : order_) rows_[n];
  if (mode_ == Mode::live) {
    ticker_ = std::thread([this] {
      std::unique_lock lk(mu_);
      while (!stop_) {
        cv_.wait_for(lk, std::chrono::milliseconds(250));
        if (stop_) break;
        clear_footer_locked();
        draw_footer_locked();
      }
    });
  }
}

Progress::~Progress() { finish(); }

void Progress::finish() {
  {
    std::lock_guard lk(mu_);
    if (stop_) return;
    stop_ = true;
    if (mode_ == Mode::live) clear_footer_locked();
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  std::lock_guard lk(mu_);
  if (mode_ == Mode::live) mode_ = Mode::plain;
}

std::string Progress::prefix(int index, const std::string& node, const std::string& action) const {
  char buf[160];
  if (index > 0) std::snprintf(buf, sizeof buf, "[%2d/%d] %-10s %-18s", index, total_, node.c_str(), action.c_str());
  else std::snprintf(buf, sizeof buf, "[rollback] %-10s %-18s", node.c_str(), action.c_str());
  return buf;
}

void Progress::clear_footer_locked() {
  if (footer_lines_ == 0) return;
  std::fprintf(out_, "\x1b[%dA\x1b[J", footer_lines_);
  footer_lines_ = 0;
}

void Progress::draw_footer_locked() {
  if (mode_ != Mode::live || stop_) return;
  const auto now = std::chrono::steady_clock::now();
  for (const auto& n : order_) {
    const Row& r = rows_[n];
    std::string text;
    if (r.busy) {
      long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - r.since).count();
      text = "  \x1b[1m" + n + "\x1b[0m  " + r.action + " ... " + secs(ms) + "  " + clip(r.note.empty() ? r.summary : r.note, 70);
    } else {
      text = "  " + n + "  " + (r.action.empty() ? "waiting" : "idle after " + r.action);
    }
    std::fprintf(out_, "%s\x1b[K\n", text.c_str());
    ++footer_lines_;
  }
  std::fflush(out_);
}

void Progress::print_locked(const std::string& text) {
  if (mode_ == Mode::quiet) return;
  clear_footer_locked();
  std::fprintf(out_, "%s\n", text.c_str());
  draw_footer_locked();
  std::fflush(out_);
}

void Progress::begin(int index, const std::string& node, const std::string& action, const std::string& summary) {
  std::lock_guard lk(mu_);
  Row& r = rows_[node];
  if (std::find(order_.begin(), order_.end(), node) == order_.end()) order_.push_back(node);
  r.action = action;
  r.summary = summary;
  r.note.clear();
  r.busy = true;
  r.since = std::chrono::steady_clock::now();
  if (mode_ == Mode::plain) print_locked(prefix(index, node, action) + " ... " + summary);
  else {
    clear_footer_locked();
    draw_footer_locked();
  }
}

void Progress::done(int index, const std::string& node, const std::string& action, const std::string& note, long long ms) {
  std::lock_guard lk(mu_);
  rows_[node].busy = false;
  print_locked(prefix(index, node, action) + " ok (" + secs(ms) + ")" + (note.empty() ? "" : "  " + note));
}

void Progress::skipped(int index, const std::string& node, const std::string& action, const std::string& why) {
  std::lock_guard lk(mu_);
  print_locked(prefix(index, node, action) + " already done" + (why.empty() ? "" : "  " + why));
}

void Progress::failed(int index, const std::string& node, const std::string& action, const std::string& error) {
  std::lock_guard lk(mu_);
  rows_[node].busy = false;
  print_locked(prefix(index, node, action) + " FAILED: " + error);
}

void Progress::note(const std::string& node, const std::string& text) {
  std::lock_guard lk(mu_);
  rows_[node].note = text;
  if (mode_ == Mode::plain) print_locked("           " + node + ": " + text);
}

void Progress::line(const std::string& text) {
  std::lock_guard lk(mu_);
  print_locked(text);
}

bool Progress::ask(const std::string& question, std::FILE* in, std::string& answer) {
  // Holding the lock keeps the ticker from drawing the footer over the question while we wait.
  std::lock_guard lk(mu_);
  clear_footer_locked();
  std::fprintf(out_, "%s", question.c_str());
  std::fflush(out_);
  answer.clear();
  int c = 0;
  while ((c = std::fgetc(in)) != EOF && c != '\n') answer += static_cast<char>(c);
  draw_footer_locked();
  return c != EOF || !answer.empty();
}

}  // namespace tandem::ctl
