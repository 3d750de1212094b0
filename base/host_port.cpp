#include "base/host_port.h"

#include "base/error.h"

#include <charconv>

namespace braid {

std::optional<HostPort> parse_host_port(std::string_view text) {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return std::nullopt;
    std::string_view host = text.substr(0, colon), port = text.substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value < 1 ||
        value > 65535)
        return std::nullopt;
    return HostPort{std::string(host), uint16_t(value)};
}

HostPort host_port_or_throw(std::string_view text, std::string_view what) {
    auto hp = parse_host_port(text);
    if (!hp)
        BRAID_THROW(ValueError, "{}: \"{}\" is not HOST:PORT (a port in 1..65535)", what, text);
    return *hp;
}

} // namespace braid
