// The scan's floor, for scripts/scan-floor.sh: simdjson's On-Demand API walking every hit of
// trackpipe-bench normalize's mix (a file of one hit per line), visiting every field of every
// object, comparing each name with the names before it in its object (the contract refuses a
// hit whose names repeat), reading every string and number. That is the least a normalizer must
// do with a hit before it judges it; trackpipe's scanner does it and the judging. With `lean`,
// strings and numbers are skipped rather than read (On-Demand then only steps over them): less
// than the contract needs, the walk's lowest cost.
//
// Not part of trackpipe: it builds only where Debian's libsimdjson-dev is installed.
#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>
#include <algorithm>
#include <cstdlib>

using namespace simdjson;

// `read_scalars`: whether strings and numbers are read (not `lean`).
static bool walk(ondemand::value value, int depth, bool read_scalars);

static bool walk_object(ondemand::object object, int depth, bool read_scalars) {
  // Unescaped names live in the parser's buffer until the next document: views suffice.
  std::string_view names[32];
  size_t count = 0;
  for (auto field : object) {
    std::string_view name;
    if (field.unescaped_key().get(name)) return false;
    for (size_t index = 0; index < count; index++)
      if (names[index] == name) return false;
    if (count < 32) names[count++] = name;
    ondemand::value value;
    if (field.value().get(value) || !walk(value, depth + 1, read_scalars)) return false;
  }
  return true;
}

static bool walk(ondemand::value value, int depth, bool read_scalars) {
  if (depth > 64) return false;
  ondemand::json_type type;
  if (value.type().get(type)) return false;
  switch (type) {
    case ondemand::json_type::object: {
      ondemand::object object;
      return !value.get_object().get(object) && walk_object(object, depth, read_scalars);
    }
    case ondemand::json_type::array: {
      ondemand::array array;
      if (value.get_array().get(array)) return false;
      for (auto element : array) {
        ondemand::value inner;
        if (element.get(inner) || !walk(inner, depth + 1, read_scalars)) return false;
      }
      return true;
    }
    case ondemand::json_type::string: {
      if (!read_scalars) return true;
      std::string_view text;
      return !value.get_string().get(text);
    }
    case ondemand::json_type::number: {
      if (!read_scalars) return true;
      double number;
      return !value.get_double().get(number);
    }
    case ondemand::json_type::boolean: {
      bool flag;
      return !value.get_bool().get(flag);
    }
    case ondemand::json_type::null:
      return value.is_null();
  }
  return false;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MIX_FILE [ROUNDS [lean]]\n", argv[0]);
    return 64;
  }
  int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const bool read_scalars = !(argc > 3 && std::string_view(argv[3]) == "lean");
  std::ifstream file(argv[1]);
  std::vector<padded_string> hits;
  for (std::string line; std::getline(file, line);) hits.emplace_back(line);
  if (hits.empty()) {
    std::fprintf(stderr, "%s: no hits in %s\n", argv[0], argv[1]);
    return 66;
  }
  ondemand::parser parser;
  size_t walked = 0;
  auto round = [&] {
    size_t count = 0;
    for (auto& hit : hits) {
      ondemand::document document;
      if (parser.iterate(hit).get(document)) continue;
      ondemand::object object;
      if (document.get_object().get(object)) continue;
      if (walk_object(object, 0, read_scalars)) count++;
    }
    walked = count;
  };
  round();  // warm up
  double best = 0;
  for (int r = 0; r < rounds; r++) {
    auto start = std::chrono::steady_clock::now();
    round();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, hits.size() / seconds);
  }
  std::printf("simdjson On-Demand walk%s %.0f hits/s (%zu walked whole)\n", read_scalars ? ":      " : ", lean:", best, walked);
  return 0;
}
