// The case lines bench_kernels reads (one per line: `suite key=value ...`, # comments), with
// the keys each suite knows, so a misspelt key from kdtree_cli/bench/suites.py is an error
// naming the line, not a silently ignored default. Host code only.
#pragma once

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kdtree::bench {

struct Case {
  std::string suite;
  std::map<std::string, std::string> args;
  std::string line;  // as written, for messages

  long long num(const std::string& key, long long fallback) const {
    auto it = args.find(key);
    return it == args.end() ? fallback : std::stoll(it->second);
  }
  long long need(const std::string& key) const {
    auto it = args.find(key);
    if (it == args.end()) throw std::runtime_error("case `" + line + "` needs " + key + "=...");
    return std::stoll(it->second);
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    auto it = args.find(key);
    return it == args.end() ? fallback : it->second;
  }
};

// Every suite's keys; `reps` and `warm` go with any suite.
inline const std::map<std::string, std::set<std::string>>& suite_keys() {
  static const std::map<std::string, std::set<std::string>> keys = {
      {"gemm", {"m", "n", "k"}},
      {"copy", {"mb"}},
      {"launch", {"smem_kb", "blocks"}},
      {"mma", {"blocks_per_sm", "iters"}},
      {"verify_attn", {"dtype", "batch", "heads", "n", "prefix", "config", "split_keys"}},
      {"topk", {"rows", "vocab", "k", "exact", "variant"}},
      {"tree_build", {"batch", "budget", "depth", "input", "vocab"}},
      {"accept", {"batch", "budget"}},
      {"compact", {"batch", "layers", "rows"}},
  };
  return keys;
}

inline Case parse_case(const std::string& line) {
  std::istringstream in(line);
  Case c;
  c.line = line;
  in >> c.suite;
  const auto suite = suite_keys().find(c.suite);
  if (suite == suite_keys().end()) throw std::runtime_error("case `" + line + "`: unknown suite `" + c.suite + "`");
  std::string kv;
  while (in >> kv) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throw std::runtime_error("case `" + line + "`: `" + kv + "` is not key=value");
    const std::string key = kv.substr(0, eq);
    if (!suite->second.count(key) && key != "reps" && key != "warm")
      throw std::runtime_error("case `" + line + "`: " + c.suite + " has no key `" + key + "`");
    c.args[key] = kv.substr(eq + 1);
  }
  return c;
}

// The cases of a file; blank lines and # comments skipped.
inline std::vector<Case> read_cases(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<Case> out;
  for (std::string line; std::getline(in, line);) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(parse_case(line));
  }
  return out;
}

}  // namespace kdtree::bench
