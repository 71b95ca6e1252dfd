#include "tests/support/http_receiver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <stdexcept>

namespace dsync::testing {
namespace {

// Sends all of `data`; false when the peer went away or the receiver stops.
bool SendAllRx(int fd, const char* data, size_t size, const std::atomic<bool>& stopping) {
  size_t done = 0;
  while (done < size) {
    if (stopping.load()) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    ssize_t n = ::send(fd, data + done, size - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

HttpReceiver::HttpReceiver(Handler handler) : handler_(std::move(handler)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 1024) != 0) {
    throw std::runtime_error(std::string("receiver: ") + std::strerror(errno));
  }
  socklen_t len = sizeof a;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { Accept(); });
}

HttpReceiver::~HttpReceiver() {
  stopping_ = true;
  acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

std::vector<HttpReceiver::Request> HttpReceiver::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

void HttpReceiver::Accept() {
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    open_++;
    std::lock_guard lock(mu_);
    threads_.emplace_back([this, fd] {
      Serve(fd);
      ::close(fd);
      open_--;
    });
  }
}

void HttpReceiver::Serve(int fd) {
  std::string raw;
  char buf[65536];
  size_t header_end;
  // Reads until `want` holds or the peer goes / the receiver stops.
  auto read_more = [&]() -> bool {
    while (!stopping_.load()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return false;
      raw.append(buf, static_cast<size_t>(n));
      return true;
    }
    return false;
  };
  while ((header_end = raw.find("\r\n\r\n")) == std::string::npos) {
    if (!read_more()) return;
  }
  Request req;
  size_t line_end = raw.find("\r\n");
  std::string line = raw.substr(0, line_end);
  size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  req.method = line.substr(0, sp1);
  req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  size_t pos = line_end + 2;
  size_t length = 0;
  while (pos < header_end) {
    size_t e = raw.find("\r\n", pos);
    std::string h = raw.substr(pos, e - pos);
    pos = e + 2;
    size_t colon = h.find(':');
    std::string name = h.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = h.substr(colon + 1);
    while (!value.empty() && value[0] == ' ') value.erase(0, 1);
    if (name == "content-length") length = std::stoul(value);
    req.headers.emplace_back(name, value);
  }
  while (raw.size() < header_end + 4 + length) {
    if (!read_more()) return;
  }
  req.body = raw.substr(header_end + 4, length);
  {
    std::lock_guard lock(mu_);
    requests_.push_back(req);
  }
  Reply reply = handler_(req);
  using Mode = Reply::Mode;
  if (reply.mode == Mode::kNeverAnswer) {
    while (!stopping_.load()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        if (::recv(fd, buf, sizeof buf, 0) <= 0) return;  // the client gave up
      }
    }
    return;
  }
  if (reply.mode == Mode::kRaw) {
    SendAllRx(fd, reply.body.data(), reply.body.size(), stopping_);
    return;
  }
  std::string head = "HTTP/1.1 " + std::to_string(reply.status) + " X\r\nConnection: close\r\n";
  for (const auto& [k, v] : reply.headers) head += k + ": " + v + "\r\n";
  if (reply.mode == Mode::kEndless) {
    head += "Content-Type: application/json\r\nContent-Length: 10737418240\r\n\r\n";
  } else if (reply.mode == Mode::kEndlessChunked) {
    head += "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  } else {
    head += "Content-Length: " + std::to_string(reply.body.size()) + "\r\n\r\n" + reply.body;
  }
  if (reply.mode == Mode::kSlowBytes) {
    for (char c : head) {
      if (!SendAllRx(fd, &c, 1, stopping_)) return;
      for (auto waited = std::chrono::milliseconds(0); waited < reply.byte_interval && !stopping_.load();
           waited += std::chrono::milliseconds(10)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    return;
  }
  if (!SendAllRx(fd, head.data(), head.size(), stopping_)) return;
  if (reply.mode == Mode::kEndless || reply.mode == Mode::kEndlessChunked) {
    std::string zeros(65536, '0');
    std::string chunk = "10000\r\n" + zeros + "\r\n";
    const std::string& piece = reply.mode == Mode::kEndless ? zeros : chunk;
    while (SendAllRx(fd, piece.data(), piece.size(), stopping_)) endless_bytes_ += piece.size();
  }
}

}  // namespace dsync::testing
