#ifndef ASYNCPS_TESTS_TESTUTIL_HTTP_GET_H_
#define ASYNCPS_TESTS_TESTUTIL_HTTP_GET_H_

#include <string>

namespace asyncps::testutil {

// Sends "GET target HTTP/1.0" to 127.0.0.1:port over a plain socket (tests need no HTTP
// library) and returns the whole answer — status line, headers and body — read until the
// server closes. Returns "" when nothing listens; gives up reading after 10 s of silence, so
// a wedged server fails the caller's check instead of hanging it. Thread-safe.
std::string HttpGet(int port, const std::string& target);

// The body of a 200 answer to HttpGet(port, target); "" for any other answer or none.
std::string HttpGetBody(int port, const std::string& target);

}  // namespace asyncps::testutil

#endif  // ASYNCPS_TESTS_TESTUTIL_HTTP_GET_H_
