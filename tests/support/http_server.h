// A loopback HTTP/1.1 server for tests of clients (the Pyroscope push): it takes one request
// per connection in a thread, records it (method, target, decoded query, headers, body) and
// answers with the replies it was given.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/base/scoped_fd.h"

namespace hvprof::testing {

// The loopback servers must be reached directly whatever proxy the environment names.
inline void BypassProxies() { setenv("no_proxy", "*", 1); }

inline std::string PercentDecode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%' && i + 2 < text.size()) {
      out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

struct Request {
  std::string method;
  std::string target;  // as sent: path and encoded query
  std::string path;
  std::map<std::string, std::string> query;    // decoded
  std::map<std::string, std::string> headers;  // names lower-case
  std::string body;
  std::string problem;  // what the server could not read, if anything
};

struct Reply {
  int status = 200;
  std::string body;
  std::string extra_headers;  // whole lines, each ending in \r\n
  int delay_ms = 0;           // a slow server: waits this long before answering
};

// An HTTP/1.1 server on 127.0.0.1, in a thread: takes one request per connection, answers
// the i-th request with the i-th reply (200 and no body past the list) and closes.
class LoopbackServer {
 public:
  // On `port` (0: any free one): a server that comes back on the port a client was given.
  explicit LoopbackServer(std::vector<Reply> replies = {}, uint16_t port = 0) : replies_(std::move(replies)) {
    BypassProxies();
    listener_ = ScopedFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(listener_.valid());
    const int reuse = 1;
    REQUIRE(setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof(reuse)) == 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    REQUIRE(bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    REQUIRE(listen(listener_.get(), 8) == 0);
    socklen_t length = sizeof(address);
    REQUIRE(getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
    int pipe_fds[2];
    REQUIRE(pipe2(pipe_fds, O_CLOEXEC) == 0);
    stop_read_ = ScopedFd(pipe_fds[0]);
    stop_write_ = ScopedFd(pipe_fds[1]);
    thread_ = std::thread([this] { Serve(); });
  }
  ~LoopbackServer() { Stop(); }

  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Stops the server and returns the requests it took, in order.
  std::vector<Request> Stop() {
    if (thread_.joinable()) {
      const char byte = 0;
      (void)!write(stop_write_.get(), &byte, 1);
      thread_.join();
    }
    return Requests();
  }

  // The requests taken so far (answered or being answered), while it runs.
  std::vector<Request> Requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }
  size_t Count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_.size();
  }

 private:
  void Serve() {
    for (;;) {
      pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents != 0) return;
      ScopedFd connection(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!connection.valid()) continue;
      Request request = ReadRequest(connection.get());
      Reply reply;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (requests_.size() < replies_.size()) reply = replies_[requests_.size()];
        requests_.push_back(std::move(request));
      }
      if (reply.delay_ms != 0) {
        // Slow, but still stoppable.
        pollfd stop = {stop_read_.get(), POLLIN, 0};
        if (poll(&stop, 1, reply.delay_ms) > 0) return;
      }
      const std::string answer = "HTTP/1.1 " + std::to_string(reply.status) + " Whatever\r\n" + reply.extra_headers +
                                 "Content-Type: text/plain\r\nContent-Length: " + std::to_string(reply.body.size()) +
                                 "\r\nConnection: close\r\n\r\n" + reply.body;
      SendAll(connection.get(), answer);
      shutdown(connection.get(), SHUT_WR);
    }
  }

  static void SendAll(int fd, std::string_view data) {
    while (!data.empty()) {
      const ssize_t sent = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (sent <= 0) return;
      data.remove_prefix(static_cast<size_t>(sent));
    }
  }

  // Appends what arrives within 2 s to `into`; false at the end of the stream or a timeout.
  static bool ReadMore(int fd, std::string& into) {
    pollfd one = {fd, POLLIN, 0};
    if (poll(&one, 1, 2000) <= 0) return false;
    char buffer[16384];
    const ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
    if (got <= 0) return false;
    into.append(buffer, static_cast<size_t>(got));
    return true;
  }

  static Request ReadRequest(int fd) {
    Request request;
    std::string data;
    size_t head_end;
    while ((head_end = data.find("\r\n\r\n")) == std::string::npos) {
      if (!ReadMore(fd, data)) {
        request.problem = "the request's head did not arrive";
        return request;
      }
    }
    const std::string head = data.substr(0, head_end);
    data.erase(0, head_end + 4);
    size_t line_end = head.find("\r\n");
    const std::string request_line = head.substr(0, line_end);
    const size_t space1 = request_line.find(' ');
    const size_t space2 = request_line.rfind(' ');
    request.method = request_line.substr(0, space1);
    request.target = request_line.substr(space1 + 1, space2 - space1 - 1);
    while (line_end != std::string::npos) {
      const size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line = head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      request.headers[name] = value;
    }
    const size_t question = request.target.find('?');
    request.path = request.target.substr(0, question);
    if (question != std::string::npos) {
      std::string_view query = std::string_view(request.target).substr(question + 1);
      while (!query.empty()) {
        const size_t amp = query.find('&');
        const std::string_view pair = query.substr(0, amp);
        const size_t equals = pair.find('=');
        request.query[PercentDecode(pair.substr(0, equals))] =
            equals == std::string_view::npos ? "" : PercentDecode(pair.substr(equals + 1));
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
      }
    }
    if (request.headers.count("expect") != 0 && request.headers["expect"] == "100-continue") {
      SendAll(fd, "HTTP/1.1 100 Continue\r\n\r\n");
    }
    if (request.headers.count("content-length") == 0) {
      request.problem = "no Content-Length";
      return request;
    }
    const size_t length = std::stoul(request.headers["content-length"]);
    while (data.size() < length) {
      if (!ReadMore(fd, data)) {
        request.problem = "the body did not arrive whole";
        break;
      }
    }
    request.body = data.substr(0, length);
    return request;
  }

  std::vector<Reply> replies_;
  std::vector<Request> requests_;
  mutable std::mutex mutex_;  // requests_, between the server thread and the test
  ScopedFd listener_;
  ScopedFd stop_read_;
  ScopedFd stop_write_;
  uint16_t port_ = 0;
  std::thread thread_;
};

// A port on 127.0.0.1 that nothing listens on: bound, then closed.
inline uint16_t ClosedPort() {
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0);
  return ntohs(address.sin_port);
}

}  // namespace hvprof::testing
