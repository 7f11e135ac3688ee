#include <doctest/doctest.h>

#include "metrics.hpp"

using tandem::engine::api::Metrics;

TEST_CASE("Prometheus text: HELP, TYPE, labelled series, escaping") {
  Metrics m;
  m.declare("tandem_requests_total", "counter", "Requests finished, by outcome");
  m.declare("tandem_kv_usage_ratio", "gauge", "Share of KV blocks in use");
  m.add("tandem_requests_total", 1, {{"outcome", "ok"}});
  m.add("tandem_requests_total", 2, {{"outcome", "ok"}});
  m.add("tandem_requests_total", 1, {{"outcome", "a\"b"}});
  m.set("tandem_kv_usage_ratio", 0.25);
  CHECK(m.get("tandem_requests_total", {{"outcome", "ok"}}) == 3);
  CHECK(m.render() ==
        "# HELP tandem_requests_total Requests finished, by outcome\n"
        "# TYPE tandem_requests_total counter\n"
        "tandem_requests_total{outcome=\"a\\\"b\"} 1\n"
        "tandem_requests_total{outcome=\"ok\"} 3\n"
        "# HELP tandem_kv_usage_ratio Share of KV blocks in use\n"
        "# TYPE tandem_kv_usage_ratio gauge\n"
        "tandem_kv_usage_ratio 0.25\n");
  CHECK(m.problems().ok());
  m.add("undeclared", 1);  // dropped and reported, not thrown (see the misuse test below)
  CHECK_FALSE(m.problems().ok());
}

TEST_CASE("a fractional counter keeps its resolution as it grows (seconds counters)") {
  Metrics m;
  m.declare("tandem_model_seconds_total", "counter", "Seconds");
  m.set("tandem_model_seconds_total", 1234567.125);  // %.6g would print 1.23457e+06
  CHECK(m.render().find("tandem_model_seconds_total 1234567.125\n") != std::string::npos);
  m.set("tandem_model_seconds_total", 0.1);  // shortest form that reads back the same, not 0.10000000000000001
  CHECK(m.render().find("tandem_model_seconds_total 0.1\n") != std::string::npos);
}

TEST_CASE("a histogram: cumulative buckets, inclusive le, +Inf, _sum and _count per label set") {
  Metrics m;
  m.declare_histogram("tandem_wait_seconds", "Seconds waited", {0.5, 1, 2.5});
  m.touch("tandem_wait_seconds", {{"model_name", "a"}});  // exists at zero before any observation
  CHECK(m.render() ==
        "# HELP tandem_wait_seconds Seconds waited\n"
        "# TYPE tandem_wait_seconds histogram\n"
        "tandem_wait_seconds_bucket{le=\"0.5\",model_name=\"a\"} 0\n"
        "tandem_wait_seconds_bucket{le=\"1.0\",model_name=\"a\"} 0\n"
        "tandem_wait_seconds_bucket{le=\"2.5\",model_name=\"a\"} 0\n"
        "tandem_wait_seconds_bucket{le=\"+Inf\",model_name=\"a\"} 0\n"
        "tandem_wait_seconds_sum{model_name=\"a\"} 0\n"
        "tandem_wait_seconds_count{model_name=\"a\"} 0\n");
  for (double v : {0.25, 1.0, 2.0, 9.0}) m.observe("tandem_wait_seconds", v, {{"model_name", "a"}});
  const std::string text = m.render();
  CHECK(text.find("tandem_wait_seconds_bucket{le=\"0.5\",model_name=\"a\"} 1\n") != std::string::npos);
  CHECK(text.find("tandem_wait_seconds_bucket{le=\"1.0\",model_name=\"a\"} 2\n") != std::string::npos);  // 1.0 <= le 1
  CHECK(text.find("tandem_wait_seconds_bucket{le=\"2.5\",model_name=\"a\"} 3\n") != std::string::npos);
  CHECK(text.find("tandem_wait_seconds_bucket{le=\"+Inf\",model_name=\"a\"} 4\n") != std::string::npos);
  CHECK(text.find("tandem_wait_seconds_sum{model_name=\"a\"} 12.25\n") != std::string::npos);
  CHECK(text.find("tandem_wait_seconds_count{model_name=\"a\"} 4\n") != std::string::npos);
  CHECK(m.problems().ok());
}

TEST_CASE("misuse drops the update, is reported by problems() and shown by render(), and throws nothing") {
  Metrics m;
  m.declare_histogram("tandem_bad", "x", {1, 1});
  m.observe("undeclared", 1);
  m.declare("tandem_a_gauge", "gauge", "x");
  m.observe("tandem_a_gauge", 1);
  m.add("undeclared", 1);  // the same misuse again is listed once
  auto p = m.problems();
  REQUIRE_FALSE(p.ok());
  CHECK(p.error().text() ==
        "metrics: histogram 'tandem_bad': bucket bounds must be strictly ascending; not declared; metric 'undeclared' "
        "was not declared; its updates are dropped; observe/touch on 'tandem_a_gauge', a gauge; dropped");
  const std::string text = m.render();
  CHECK(text.find("tandem_bad") > text.find("# tandem metrics misuse: histogram 'tandem_bad'"));
  CHECK(text.find("# TYPE tandem_bad") == std::string::npos);
  CHECK(text.find("tandem_a_gauge 0\n") != std::string::npos);
  CHECK(text.find("# tandem metrics misuse: metric 'undeclared' was not declared") != std::string::npos);
}
