// HOST:PORT addresses, as the CLIs, braid-launch's environment (BRAID_SERVER) and a
// CollectiveBinding's server give them: one parser for all.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace braid {

struct HostPort {
    std::string host; //!< a name, an IPv4 address, or an IPv6 address without its brackets
    uint16_t port = 0;
};

//! Parses "HOST:PORT" ("[::1]:5000" for an IPv6 host); nullopt when the host is empty or the
//! port is not a number in 1..65535.
std::optional<HostPort> parse_host_port(std::string_view text);

//! parse_host_port, or ValueError naming `what` and the text.
HostPort host_port_or_throw(std::string_view text, std::string_view what);

} // namespace braid
