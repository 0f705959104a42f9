// skeleton.cpp: the checks of skeleton.h, with simdjson On-Demand and chunk_parser.h's number
// readers, so that the file's events and the rest take the same view of what is valid JSON.
#include "skeleton.h"

#include <simdjson.h>

#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "chunk_parser.h"

namespace shardlab::viewer::loader {

namespace {

[[noreturn]] void not_json(simdjson::error_code err) {
  throw FileError(std::string("not valid JSON: ") + simdjson::error_message(err));
}

// Reads a JSON value all through (the parts of a file outside the events are small), as
// nlohmann would have: big integers are numbers, 1e999 is not. Throws FileError.
void check_value(od::value v) {
  od::json_type t{};
  if (const auto err = v.type().get(t)) not_json(err);
  simdjson::error_code err = simdjson::SUCCESS;
  switch (t) {
    case od::json_type::object: {
      od::object o;
      if ((err = v.get_object().get(o))) break;
      for (auto fr : o) {
        od::field f;
        std::string_view k;
        if ((err = std::move(fr).get(f)) || (err = f.unescaped_key().get(k))) break;
        check_value(f.value());
      }
      break;
    }
    case od::json_type::array: {
      od::array a;
      if ((err = v.get_array().get(a))) break;
      for (auto er : a) {
        od::value e;
        if ((err = std::move(er).get(e))) break;
        check_value(e);
      }
      break;
    }
    case od::json_type::number:
      if (read_number(v).kind == Num::none) throw FileError("not valid JSON: " + bad_number(v.raw_json_token()));
      break;
    case od::json_type::string: {
      std::string_view s;
      err = v.get_string().get(s);
      break;
    }
    case od::json_type::boolean:
    case od::json_type::null: {
      bool b = false;
      const bool bad = t == od::json_type::boolean ? v.get_bool().get(b) != simdjson::SUCCESS
                                                   : (v.is_null().get(b) != simdjson::SUCCESS || !b);
      if (bad)
        throw FileError("not valid JSON: invalid literal '" + std::string(token_text(v.raw_json_token())) + "'");
      break;
    }
  }
  if (err) not_json(err);
}

}  // namespace

void scalar_top(const std::string& text) {
  const simdjson::padded_string padded(text);
  od::parser parser;
  od::document doc;
  od::json_type t{};
  simdjson::error_code err = parser.iterate(padded).get(doc);
  if (!err) err = doc.type().get(t);
  if (!err) {
    switch (t) {
      case od::json_type::number: {
        double d = 0;
        if ((err = doc.get_double().get(d)) == simdjson::NUMBER_ERROR) {
          std::string_view raw;
          if (doc.raw_json_token().get(raw)) raw = text;
          throw FileError("not valid JSON: " + bad_number(raw));
        }
        break;
      }
      case od::json_type::string: {
        std::string_view str;
        err = doc.get_string().get(str);
        break;
      }
      case od::json_type::boolean:
      case od::json_type::null: {
        bool b = false;
        err = t == od::json_type::boolean ? doc.get_bool().get(b) : doc.is_null().get(b);
        if (err == simdjson::INCORRECT_TYPE || (!err && t == od::json_type::null && !b)) {
          std::string_view raw;
          if (doc.raw_json_token().get(raw)) raw = text;
          throw FileError("not valid JSON: invalid literal '" + std::string(token_text(raw)) + "'");
        }
        break;
      }
      default: break;  // objects and arrays are told apart by their first byte
    }
  }
  if (err) not_json(err);  // trailing content after a scalar is one (TRAILING_CONTENT)
  throw FileError("the top level is not an object");
}

namespace {

// Calls f(key, value) for each member of an object; every value f does not read must be
// passed to check_value (so the whole skeleton is validated as JSON).
template <typename F>
void for_each_member(od::object object, F&& f) {
  for (auto fr : object) {
    od::field field;
    std::string_view key;
    if (const auto err = std::move(fr).get(field)) not_json(err);
    if (const auto err = field.unescaped_key().get(key)) not_json(err);
    f(key, field.value());
  }
}

bool is(od::value& v, od::json_type want) {
  od::json_type t{};
  return !v.type().get(t) && t == want;
}

od::object object_of(od::value& v) {
  od::object o;
  if (const auto err = v.get_object().get(o)) not_json(err);
  return o;
}

// A number that is an integer, else nullopt (a number that is not valid JSON throws).
std::optional<int64_t> integer_of(od::value& v) {
  const Num n = read_number(v);
  if (n.kind == Num::none) throw FileError("not valid JSON: " + bad_number(v.raw_json_token()));
  return n.as_int();
}

// otherData: "incomplete": true and "failure": {"rank": R, "kind": ..., "reason": ...}.
void read_other_data(od::object other, SkeletonInfo& info) {
  bool incomplete = false;
  std::string reason;
  int64_t failed_rank = -1;
  for_each_member(other, [&](std::string_view key, od::value v) {
    if (key == "incomplete" && is(v, od::json_type::boolean)) {
      if (const auto err = v.get_bool().get(incomplete)) not_json(err);
    } else if (key == "failure" && is(v, od::json_type::object)) {
      for_each_member(object_of(v), [&](std::string_view k, od::value w) {
        std::string_view text;
        if (k == "reason" && is(w, od::json_type::string) && !w.get_string().get(text)) reason = text;
        else if (k == "rank" && is(w, od::json_type::number)) failed_rank = integer_of(w).value_or(-1);
        else check_value(w);
      });
    } else {
      check_value(v);
    }
  });
  if (incomplete)
    info.incomplete = (failed_rank >= 0 ? "rank " + std::to_string(failed_rank) + ": " : std::string()) +
                      (reason.empty() ? "the run failed" : reason);
}

}  // namespace

SkeletonInfo read_skeleton(const std::string& skeleton) {
  const simdjson::padded_string text(skeleton);
  od::parser parser;
  od::document doc;
  od::object top;
  if (const auto err = parser.iterate(text).get(doc)) not_json(err);
  if (const auto err = doc.get_object().get(top)) not_json(err);
  SkeletonInfo out;
  for_each_member(top, [&](std::string_view key, od::value v) {
    if (key == "otherData" && is(v, od::json_type::object)) {
      read_other_data(object_of(v), out);
    } else if (key == "distributedInfo" && is(v, od::json_type::object)) {
      for_each_member(object_of(v), [&](std::string_view k, od::value r) {
        if (k != "rank" || !is(r, od::json_type::number)) return check_value(r);
        const auto i = integer_of(r);
        if (i && *i >= 0 && *i <= std::numeric_limits<int>::max()) out.rank = static_cast<int>(*i);
      });
    } else {
      check_value(v);
    }
  });
  return out;  // (the scanner has seen that nothing follows the object)
}

}  // namespace shardlab::viewer::loader
