// The experiment directory's files (internal/experiment.hpp): JSON
// written here, read back with yaml-cpp (JSON is YAML; quoted scalars
// carry the tag "!", so texts stay texts).

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "collectives/observe/timeline.hpp"
#include "hvactor/errors.hpp"
#include "tune/internal/experiment.hpp"
#include "tune/internal/space.hpp"

namespace fs = std::filesystem;

namespace hvactor::tune {

namespace {

/// `s` as a JSON string (bytes that are not UTF-8 become U+FFFD: a
/// reader must not choke on a config's text).
std::string quote(const std::string& s) {
  return "\"" + collectives::json_escape(s) + "\"";
}

std::string json_value(const value& v) {
  if (v.is_string())
    return quote(v.as_string());
  if (v.is_int())
    return std::to_string(v.as_int());
  auto x = v.as_double();
  if (std::isnan(x))
    return "NaN";
  if (std::isinf(x))
    return x > 0 ? "Infinity" : "-Infinity";
  auto s = fmt::format("{}", x);
  if (s.find_first_of(".eE") == std::string::npos)
    s += ".0";
  return s;
}

value value_of(const YAML::Node& n, const std::string& what) {
  if (!n.IsScalar())
    throw std::runtime_error(fmt::format("{}: a value is not a number or a text", what));
  auto& s = n.Scalar();
  if (n.Tag() == "!")
    return s;
  if (s == "NaN")
    return std::nan("");
  if (s == "Infinity")
    return HUGE_VAL;
  if (s == "-Infinity")
    return -HUGE_VAL;
  try {
    size_t used = 0;
    if (s.find_first_of(".eE") != std::string::npos) {
      // strtod, not stod: subnormals (1e-310) come back with ERANGE, and
      // are the values that were written.
      char* end = nullptr;
      auto x = std::strtod(s.c_str(), &end);
      if (end == s.c_str() + s.size())
        return x;
    } else {
      auto x = std::stoll(s, &used);
      if (used == s.size())
        return x;
    }
  } catch (const std::exception&) {
  }
  if (s == "true" || s == "false")
    return s == "true";
  throw std::runtime_error(fmt::format("{}: '{}' is not a number", what, s));
}

metrics metrics_of(const YAML::Node& n, const std::string& what) {
  if (!n.IsMap())
    throw std::runtime_error(fmt::format("{}: not a JSON object", what));
  metrics m;
  for (auto it : n)
    m[it.first.as<std::string>()] = value_of(it.second, what);
  return m;
}

trial_status status_of(const std::string& s, const std::string& what) {
  for (auto st : {trial_status::pending, trial_status::running, trial_status::terminated,
                  trial_status::error})
    if (s == to_string(st))
      return st;
  throw std::runtime_error(fmt::format("{}: unknown trial status '{}'", what, s));
}

std::string json_list(const std::vector<value>& vs) {
  std::string out = "[";
  for (auto& v : vs)
    out += (out.size() > 1 ? ", " : "") + json_value(v);
  return out + "]";
}

std::vector<value> list_of(const YAML::Node& n, const std::string& what) {
  if (!n.IsSequence())
    throw std::runtime_error(fmt::format("{}: a list of values is not a list", what));
  std::vector<value> out;
  for (auto x : n)
    out.push_back(value_of(x, what));
  return out;
}

/// The space as a list of leaves, each {"path", "kind", ...}.
std::string space_json(const param_space& space) {
  std::string out = "[";
  for (auto& l : flatten(space)) {
    auto& p = l.p->get();
    std::string entry;
    if (auto* v = std::get_if<value>(&p)) {
      entry = fmt::format("\"kind\": \"value\", \"value\": {}", json_value(*v));
    } else if (auto* g = std::get_if<grid>(&p)) {
      entry = fmt::format("\"kind\": \"grid\", \"values\": {}", json_list(g->values));
    } else {
      auto& d = std::get<domain>(p);
      static const char* kinds[] = {"uniform", "quniform", "loguniform", "randint", "choice"};
      entry = fmt::format("\"kind\": \"{}\", \"lower\": {}, \"upper\": {}, \"q\": {}, "
                          "\"values\": {}",
                          kinds[static_cast<int>(d.type())],
                          d.type() == domain::kind::randint ? json_value(d.int_lower())
                                                            : json_value(d.lower()),
                          d.type() == domain::kind::randint ? json_value(d.int_upper())
                                                            : json_value(d.upper()),
                          json_value(d.q()), json_list(d.categories()));
    }
    out += fmt::format("{}{{\"path\": {}, {}}}", out.size() > 1 ? ", " : "", quote(l.path), entry);
  }
  return out + "]";
}

void insert_leaf(param_space& space, const std::string& path, param p) {
  auto slash = path.find('/');
  if (slash == std::string::npos) {
    space.insert_or_assign(path, std::move(p));
    return;
  }
  auto head = path.substr(0, slash);
  param_space nested;
  if (auto i = space.find(head); i != space.end())
    if (auto* n = std::get_if<std::shared_ptr<const param_space>>(&i->second.get()))
      nested = **n;
  insert_leaf(nested, path.substr(slash + 1), std::move(p));
  space.insert_or_assign(head, param{std::move(nested)});
}

param_space space_of(const YAML::Node& n, const std::string& what) {
  if (!n.IsSequence())
    throw std::runtime_error(fmt::format("{}: param_space is not a list", what));
  param_space space;
  for (auto e : n) {
    auto path = e["path"].as<std::string>();
    auto kind = e["kind"].as<std::string>();
    auto num = [&](const char* k) { return value_of(e[k], what).as_double(); };
    if (kind == "value")
      insert_leaf(space, path, param{value_of(e["value"], what)});
    else if (kind == "grid")
      insert_leaf(space, path, param{grid_search(list_of(e["values"], what))});
    else if (kind == "uniform")
      insert_leaf(space, path, param{uniform(num("lower"), num("upper"))});
    else if (kind == "quniform")
      insert_leaf(space, path, param{quniform(num("lower"), num("upper"), num("q"))});
    else if (kind == "loguniform")
      insert_leaf(space, path, param{loguniform(num("lower"), num("upper"), num("q"))});
    else if (kind == "randint")
      insert_leaf(space, path,
                  param{randint(value_of(e["lower"], what).as_int(),
                                value_of(e["upper"], what).as_int())});
    else if (kind == "choice")
      insert_leaf(space, path, param{choice(list_of(e["values"], what))});
    else
      throw std::runtime_error(fmt::format("{}: unknown parameter kind '{}'", what, kind));
  }
  return space;
}

} // namespace

std::string to_json(const metrics& m) {
  std::string out = "{";
  for (auto& [k, v] : m)
    out += fmt::format("{}{}: {}", out.size() > 1 ? ", " : "", quote(k), json_value(v));
  return out + "}";
}

metrics metrics_from_json(const std::string& text, const std::string& what) {
  try {
    return metrics_of(YAML::Load(text), what);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(fmt::format("{}: not JSON: {}", what, e.what()));
  }
}

void write_atomically(const fs::path& path, const std::string& text) {
  auto tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out{tmp, std::ios::binary | std::ios::trunc};
    out << text;
    if (!out.flush())
      throw error(fmt::format("tune: cannot write '{}'", tmp.string()));
  }
  // The rename is atomic; fsync first so a crash cannot leave an empty file.
  if (int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    throw error(fmt::format("tune: cannot write '{}': {}", path.string(), ec.message()));
}

void save_experiment(const fs::path& dir, const experiment_record& e) {
  std::string trials;
  for (auto& t : e.trials) {
    trials += fmt::format(
      "{}\n  {{\"trial_id\": {}, \"status\": {}, \"config\": {}, \"checkpoint\": {}, "
      "\"checkpoint_iteration\": {}, \"checkpoint_time\": {}, \"iteration_offset\": {}, "
      "\"time_offset\": {}, \"error\": {}, \"stopped_early\": {}, \"num_workers\": {}, "
      "\"cpus_per_worker\": {}}}",
      trials.empty() ? "" : ",", quote(t.trial_id), quote(to_string(t.status)), to_json(t.config),
      quote(t.checkpoint), t.checkpoint_iteration, json_value(t.checkpoint_time),
      t.iteration_offset, json_value(t.time_offset), quote(t.error),
      t.stopped_early ? "true" : "false", t.num_workers, t.cpus_per_worker);
  }
  auto text = fmt::format("{{\"version\": 1, \"name\": {}, \"metric\": {}, \"mode\": {}, "
                          "\"num_samples\": {}, \"seed\": {},\n\"param_space\": {},\n"
                          "\"trials\": [{}\n]}}\n",
                          quote(e.name), quote(e.metric), quote(e.mode), e.num_samples,
                          e.seed, space_json(e.space), trials);
  write_atomically(dir / experiment_file, text);
}

experiment_record load_experiment(const fs::path& dir) {
  auto path = dir / experiment_file;
  auto what = path.string();
  std::ifstream in{path};
  if (!in)
    throw std::invalid_argument(
      fmt::format("tuner::restore: '{}' holds no experiment ({} is missing)", dir.string(),
                  experiment_file));
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    auto n = YAML::Load(buf.str());
    if (!n.IsMap() || !n["trials"] || !n["trials"].IsSequence())
      throw std::runtime_error("not an experiment state");
    if (n["version"].as<int>() != 1)
      throw std::runtime_error("written by another version of hvactor::tune");
    experiment_record e;
    e.name = n["name"].as<std::string>();
    e.metric = n["metric"].as<std::string>();
    e.mode = n["mode"].as<std::string>();
    e.num_samples = n["num_samples"].as<int64_t>();
    e.seed = n["seed"].as<uint64_t>();
    e.space = space_of(n["param_space"], what);
    for (auto t : n["trials"]) {
      trial_record r;
      r.trial_id = t["trial_id"].as<std::string>();
      if (r.trial_id.empty() || r.trial_id.find('/') != std::string::npos || r.trial_id == "."
          || r.trial_id == "..")
        throw std::runtime_error(fmt::format("a trial id '{}' is not a directory name", r.trial_id));
      r.status = status_of(t["status"].as<std::string>(), what);
      r.config = metrics_of(t["config"], what);
      r.checkpoint = t["checkpoint"].as<std::string>();
      r.checkpoint_iteration = t["checkpoint_iteration"].as<int64_t>();
      r.checkpoint_time = value_of(t["checkpoint_time"], what).as_double();
      r.iteration_offset = t["iteration_offset"].as<int64_t>();
      r.time_offset = value_of(t["time_offset"], what).as_double();
      r.error = t["error"].as<std::string>();
      r.stopped_early = t["stopped_early"].as<bool>();
      r.num_workers = t["num_workers"].as<int>();
      r.cpus_per_worker = t["cpus_per_worker"].as<int>();
      e.trials.push_back(std::move(r));
    }
    return e;
  } catch (const std::exception& ex) {
    throw std::invalid_argument(
      fmt::format("tuner::restore: cannot read '{}': {}", what, ex.what()));
  }
}

} // namespace hvactor::tune
