// Floating-point values cross CAF exactly (base/hvactor/float_bits.hpp):
// CAF 0.17's own conversion loops forever on an infinity, so every
// round trip here runs in a child process that SIGALRM ends after 5 s: a
// regression fails the case instead of hanging the suite.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/message.hpp>
#include <doctest/doctest.h>

#include <hvactor/serialization.hpp>

#include "actors/protocol/interfaces.hpp"

namespace {

/// Runs `check` in a child process (ended by SIGALRM after 5 s) and
/// returns what it returned: empty when every value arrived, else the
/// values that did not; or that the child hung.
std::string in_child(const std::function<std::string()>& check) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(5);
    std::string out;
    try {
      out = check();
    } catch (const std::exception& e) {
      out = std::string{"threw: "} + e.what();
    }
    for (size_t at = 0; at < out.size();) {
      auto n = ::write(fds[1], out.data() + at, out.size() - at);
      if (n <= 0)
        break;
      at += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) != 0;)
    if (n > 0)
      out.append(buf, static_cast<size_t>(n));
    else if (errno != EINTR)
      break;
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    return "the round trip hung: its process was ended by signal "
           + std::to_string(WTERMSIG(status)) + (WTERMSIG(status) == SIGALRM ? " (5 s)" : "");
  return out;
}

template <class T>
using bits_of = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

template <class T>
std::string hex(T x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx",
                static_cast<unsigned long long>(std::bit_cast<bits_of<T>>(x)));
  return buf;
}

/// inf, -inf, NaNs (quiet, negative, signalling, with a payload),
/// subnormals, signed zeros, the extremes and two ordinary values.
template <class T>
std::vector<T> specials() {
  using lim = std::numeric_limits<T>;
  bits_of<T> payload = sizeof(T) == 4 ? bits_of<T>{0x7fc00123u} : bits_of<T>(0x7ff8000000000123ull);
  return {lim::infinity(),
          -lim::infinity(),
          lim::quiet_NaN(),
          -lim::quiet_NaN(),
          lim::signaling_NaN(),
          std::bit_cast<T>(payload),
          lim::denorm_min(),
          -lim::denorm_min(),
          std::nextafter(lim::min(), T{0}), // the largest subnormal
          T{0},
          -T{0},
          lim::min(),
          lim::max(),
          lim::lowest(),
          lim::epsilon(),
          static_cast<T>(0.1),
          static_cast<T>(-1.5)};
}

/// "" when `got` holds `want`'s values bit for bit, else each difference.
template <class T>
std::string differences(const std::vector<T>& want, const std::vector<T>& got,
                        const std::string& what) {
  if (want.size() != got.size())
    return what + ": " + std::to_string(got.size()) + " values arrived, "
           + std::to_string(want.size()) + " left\n";
  std::string out;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::bit_cast<bits_of<T>>(want[i]) != std::bit_cast<bits_of<T>>(got[i]))
      out += what + "[" + std::to_string(i) + "]: sent " + hex(want[i]) + ", got " + hex(got[i])
             + "\n";
  return out;
}

/// A user struct with floating-point members, as executor calls carry them.
struct sample {
  double value = 0;
  float small = 0;
  std::vector<double> series;
  std::map<std::string, double> metrics;
  std::pair<std::string, float> named;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sample& x) {
  return f(caf::meta::type_name("sample"), x.value, x.small, x.series, x.metrics, x.named);
}

template <class T>
std::string pack_round_trips() {
  std::string out;
  auto values = specials<T>();
  for (size_t i = 0; i < values.size(); ++i) {
    auto buf = hvactor::detail::pack(values[i]);
    auto [back] = hvactor::detail::unpack<T>(buf);
    out += differences<T>({values[i]}, {back}, "scalar " + std::to_string(i));
  }
  auto buf = hvactor::detail::pack(values);
  out += differences(values, std::get<0>(hvactor::detail::unpack<std::vector<T>>(buf)), "vector");
  std::map<std::string, T> named;
  for (size_t i = 0; i < values.size(); ++i)
    named["m" + std::to_string(100 + i)] = values[i];
  buf = hvactor::detail::pack(named);
  auto [named_back] = hvactor::detail::unpack<std::map<std::string, T>>(buf);
  std::vector<T> got;
  for (auto& [k, v] : named_back)
    got.push_back(v);
  out += differences(values, got, "map");
  return out;
}

hvactor::proto::train_point odd_point() {
  using lim = std::numeric_limits<double>;
  hvactor::proto::train_point p;
  p.job_id = "job-1";
  p.run = "run";
  p.iteration = 3;
  p.time_s = lim::infinity();
  for (size_t i = 0; i < specials<double>().size(); ++i)
    p.metrics.emplace_back("m" + std::to_string(i), specials<double>()[i]);
  return p;
}

hvactor::proto::job_view odd_job() {
  using lim = std::numeric_limits<double>;
  hvactor::proto::job_view v;
  v.job_id = "job-1";
  v.ranks.push_back({.id = 0, .rank = 0, .node = "n", .pid = 1, .state = "running",
                     .cpu_seconds = lim::quiet_NaN(), .rss_bytes = 7});
  v.ranks.push_back({.id = 1, .rank = 1, .cpu_seconds = -lim::infinity()});
  v.ops.push_back({.op = "allreduce", .path = "shm", .count = 2, .bytes = 8,
                   .seconds = lim::denorm_min()});
  return v;
}

std::vector<double> floats_of(const hvactor::proto::train_point& p) {
  std::vector<double> out{p.time_s};
  for (auto& [name, v] : p.metrics)
    out.push_back(v);
  return out;
}

std::vector<double> floats_of(const hvactor::proto::job_view& v) {
  std::vector<double> out;
  for (auto& r : v.ranks)
    out.push_back(r.cpu_seconds);
  for (auto& o : v.ops)
    out.push_back(o.seconds);
  return out;
}

/// `x` as BASP carries it: in a caf::message, through CAF's binary format
/// and the system's type registry.
template <class T>
std::string message_round_trip(caf::actor_system& sys, const T& x) {
  auto msg = caf::make_message(x);
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  if (auto err = sink(msg))
    return "cannot serialize: " + sys.render(err) + "\n";
  caf::message back;
  caf::binary_deserializer source{sys, buf};
  if (auto err = source(back))
    return "cannot deserialize: " + sys.render(err) + "\n";
  if (!back.match_elements<T>())
    return "another message arrived: " + caf::to_string(back) + "\n";
  return differences(floats_of(x), floats_of(back.get_as<T>(0)), caf::to_string(msg).substr(0, 60));
}

/// A colocator's sample with an infinite CPU time, through the inspect
/// CAF calls for a message element.
std::string rank_stats_round_trip(caf::actor_system& sys) {
  hvactor::proto::rank_stats stats{{{.id = 2, .cpu_seconds = std::numeric_limits<double>::infinity()}}};
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  if (auto err = sink(stats))
    return sys.render(err);
  hvactor::proto::rank_stats back;
  caf::binary_deserializer source{sys, buf};
  if (auto err = source(back))
    return sys.render(err);
  return differences<double>({stats.ranks[0].cpu_seconds}, {back.ranks.at(0).cpu_seconds},
                             "rank_stats");
}

/// A user struct, an int and long doubles as one call's arguments.
std::string user_values_round_trip() {
  using lim = std::numeric_limits<double>;
  sample s{lim::infinity(), -std::numeric_limits<float>::infinity(), specials<double>(),
           {{"loss", lim::quiet_NaN()}, {"tiny", -lim::denorm_min()}},
           {"lr", std::numeric_limits<float>::denorm_min()}};
  int32_t rank = 3;
  long double ld_inf = -std::numeric_limits<long double>::infinity();
  long double ld_tenth = 0.1L;
  long double ld_tiny = std::numeric_limits<long double>::denorm_min();
  auto buf = hvactor::detail::pack(s, rank, ld_inf, ld_tenth, ld_tiny);
  auto [b, r, li, lt, ly] =
    hvactor::detail::unpack<sample, int32_t, long double, long double, long double>(buf);
  std::string out = differences<double>({s.value}, {b.value}, "value")
                    + differences<float>({s.small}, {b.small}, "small")
                    + differences(s.series, b.series, "series")
                    + differences<double>({s.metrics["loss"], s.metrics["tiny"]},
                                          {b.metrics["loss"], b.metrics["tiny"]}, "metrics")
                    + differences<float>({s.named.second}, {b.named.second}, "named");
  if (r != 3 || b.named.first != "lr" || b.metrics.size() != 2)
    out += "the other members changed\n";
  if (li != ld_inf || lt != ld_tenth || ly != ld_tiny)
    out += "a long double changed\n";
  long double ld_nan = -std::numeric_limits<long double>::quiet_NaN();
  auto [ln] = hvactor::detail::unpack<long double>(hvactor::detail::pack(ld_nan));
  if (!std::isnan(ln) || !std::signbit(ln))
    out += "a negative long double NaN did not arrive as one\n";
  return out;
}

} // namespace

TEST_SUITE("float_bits") {

TEST_CASE("pack and unpack carry inf, -inf, NaNs, subnormals, -0.0 and the extremes bit for bit") {
  CHECK(in_child(pack_round_trips<double>) == "");
  CHECK(in_child(pack_round_trips<float>) == "");
}

TEST_CASE("a user struct, a tuple of arguments and long double keep their special values") {
  CHECK(in_child(user_values_round_trip) == "");
}

TEST_CASE("a malformed long double is an error naming it, not a value") {
  std::string text = "1.5 and more";
  auto buf = hvactor::detail::pack(text);
  try {
    hvactor::detail::unpack<long double>(buf);
    FAIL("no error");
  } catch (const hvactor::error& e) {
    CHECK(std::string{e.what()}.find("not a long double: '1.5 and more'") != std::string::npos);
  }
}

TEST_CASE("the head's messages (train_point, job_view) carry inf and NaN through CAF's format") {
  caf::actor_system_config cfg;
  hvactor::proto::register_types(cfg);
  caf::actor_system sys{cfg};
  CHECK(in_child([&] { return message_round_trip(sys, odd_point()); }) == "");
  CHECK(in_child([&] { return message_round_trip(sys, odd_job()); }) == "");
  CHECK(in_child([&] { return rank_stats_round_trip(sys); }) == "");
  // Printing them (CAF's to_string) shows the values themselves.
  auto text = caf::to_string(caf::make_message(odd_point()));
  CHECK(text.find("inf") != std::string::npos);
}

}
