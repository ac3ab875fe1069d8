// The control channel between `hvprof` and an hvprofd agent: a Unix stream socket carrying
// one JSON request and one JSON response per connection, each a 4-byte little-endian length
// and that many bytes of UTF-8 JSON. Requests are {"action": "...", ...}; responses are
// {"ok": true, ...} or {"ok": false, "error": "message", "kind": "..."}.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"

namespace hvprof::agent {

using Json = nlohmann::json;

inline constexpr uint32_t kMaxControlMessage = 64u << 20;

// Sends `request` to the agent at `socket_path` and waits up to `timeout` for its answer.
// kNotFound when nobody listens there.
Result<Json> Request(const std::string& socket_path, const Json& request,
                     std::chrono::milliseconds timeout);
// The same, patient with a busy agent: each time `timeout` passes without the whole answer,
// `still_working()` decides whether to wait another `timeout` (e.g. while the agent's process
// is alive and uses CPU) or to give up ("timed out waiting for the agent").
Result<Json> Request(const std::string& socket_path, const Json& request,
                     std::chrono::milliseconds timeout, const std::function<bool()>& still_working);

// Server side.
Result<ScopedFd> Listen(const std::string& socket_path);
Result<Json> ReadMessage(int fd, std::chrono::milliseconds timeout,
                         const std::function<bool()>& still_working = {});
Result<void> WriteMessage(int fd, const Json& message);

Json OkResponse(Json fields = Json::object());
Json ErrorResponse(const Error& error);
// Turns an {"ok": false} response into an Error (kind preserved), else passes it through.
Result<Json> CheckResponse(Json response);

}  // namespace hvprof::agent
