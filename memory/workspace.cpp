#include "memory/workspace.h"

#include "base/error.h"
#include "base/log.h"

namespace braid {

void Workspace::assign(Tensor planned) {
    BRAID_ASSERT(planned.empty() || planned.device().kind == Device::Kind::CPU,
                 "a workspace is host memory");
    m_planned = std::move(planned);
    m_own = Storage();
}

uint8_t* Workspace::get(size_t bytes) {
    if (bytes == 0) return nullptr;
    if (bytes <= planned_bytes()) return m_planned.raw_ptr();
    if (bytes > m_own.size()) {
        logger()->debug("workspace: {} bytes asked, {} planned: allocating them", bytes,
                        planned_bytes());
        m_own = Storage(); // the old block first: never both at once
        m_own = Storage::make(aligned(bytes));
    }
    return m_own.ptr();
}

WorkspaceSlices::Claim::Claim(WorkspaceSlices& slices) : m_slices(slices), m_index(0) {
    auto& busy = slices.m_busy;
    while (m_index < busy.size() && busy[m_index].exchange(true, std::memory_order_acquire))
        ++m_index;
    BRAID_ASSERT(m_index < busy.size(), "more chunks at once than workspace slices ({})",
                 busy.size());
}

} // namespace braid
