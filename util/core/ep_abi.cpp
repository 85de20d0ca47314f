// The endpoint's libfabric ops tables: thin noexcept trampolines that take
// the domain lock, call one member and return its status.
#include <mutex>

#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "core/domain.hpp"
#include "core/endpoint.hpp"

namespace pm {
namespace {

template <class F>
inline ssize_t locked(Endpoint* ep, F&& f) noexcept {
  return guard([&]() -> ssize_t {
    std::lock_guard<std::mutex> g(ep->domain().lock());
    return f();
  });
}

inline iovec one(const void* buf, size_t len) { return iovec{const_cast<void*>(buf), len}; }

ssize_t pm_ep_send(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] { return ep->send(&v, 1, dest, 0, 0, ctx, ep->tx_op_flags(), false); });
}
ssize_t pm_ep_sendv(fid_ep* f, const iovec* iov, void** desc, size_t cnt, fi_addr_t dest, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] { return ep->send(iov, cnt, dest, 0, 0, ctx, ep->tx_op_flags(), false); });
}
ssize_t pm_ep_sendmsg(fid_ep* f, const fi_msg* m, uint64_t flags) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] {
    return ep->send(m->msg_iov, m->iov_count, m->addr, 0, m->data, m->context, flags, false);
  });
}
ssize_t pm_ep_inject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] { return ep->send(&v, 1, dest, 0, 0, nullptr, FI_INJECT, false); });
}
ssize_t pm_ep_senddata(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data,
                       fi_addr_t dest, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] {
    return ep->send(&v, 1, dest, 0, data, ctx, ep->tx_op_flags() | FI_REMOTE_CQ_DATA, false);
  });
}
ssize_t pm_ep_injectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] {
    return ep->send(&v, 1, dest, 0, data, nullptr, FI_INJECT | FI_REMOTE_CQ_DATA, false);
  });
}
ssize_t pm_ep_recv(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] { return ep->recv(&v, 1, src, 0, 0, ctx, ep->rx_op_flags(), false); });
}
ssize_t pm_ep_recvv(fid_ep* f, const iovec* iov, void** desc, size_t cnt, fi_addr_t src, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] { return ep->recv(iov, cnt, src, 0, 0, ctx, ep->rx_op_flags(), false); });
}
ssize_t pm_ep_recvmsg(fid_ep* f, const fi_msg* m, uint64_t flags) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] {
    return ep->recv(m->msg_iov, m->iov_count, m->addr, 0, 0, m->context, flags, false);
  });
}

ssize_t pm_ep_tsend(fid_ep* f, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t tag,
                    void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] { return ep->send(&v, 1, dest, tag, 0, ctx, ep->tx_op_flags(), true); });
}
ssize_t pm_ep_tsendv(fid_ep* f, const iovec* iov, void** desc, size_t cnt, fi_addr_t dest, uint64_t tag,
                     void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] { return ep->send(iov, cnt, dest, tag, 0, ctx, ep->tx_op_flags(), true); });
}
ssize_t pm_ep_tsendmsg(fid_ep* f, const fi_msg_tagged* m, uint64_t flags) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] {
    return ep->send(m->msg_iov, m->iov_count, m->addr, m->tag, m->data, m->context, flags, true);
  });
}
ssize_t pm_ep_tinject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest, uint64_t tag) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] { return ep->send(&v, 1, dest, tag, 0, nullptr, FI_INJECT, true); });
}
ssize_t pm_ep_tsenddata(fid_ep* f, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest,
                        uint64_t tag, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] {
    return ep->send(&v, 1, dest, tag, data, ctx, ep->tx_op_flags() | FI_REMOTE_CQ_DATA, true);
  });
}
ssize_t pm_ep_tinjectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                          uint64_t tag) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] {
    return ep->send(&v, 1, dest, tag, data, nullptr, FI_INJECT | FI_REMOTE_CQ_DATA, true);
  });
}
ssize_t pm_ep_trecv(fid_ep* f, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag,
                    uint64_t ignore, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  iovec v = one(buf, len);
  return locked(ep, [&] { return ep->recv(&v, 1, src, tag, ignore, ctx, ep->rx_op_flags(), true); });
}
ssize_t pm_ep_trecvv(fid_ep* f, const iovec* iov, void** desc, size_t cnt, fi_addr_t src, uint64_t tag,
                     uint64_t ignore, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] { return ep->recv(iov, cnt, src, tag, ignore, ctx, ep->rx_op_flags(), true); });
}
ssize_t pm_ep_trecvmsg(fid_ep* f, const fi_msg_tagged* m, uint64_t flags) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] {
    return ep->recv(m->msg_iov, m->iov_count, m->addr, m->tag, m->ignore, m->context, flags, true);
  });
}

ssize_t pm_ep_cancel(fid_t f, void* ctx) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return locked(ep, [&] { return ep->cancel(ctx); });
}
int pm_ep_getopt(fid_t f, int level, int name, void* val, size_t* len) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return int(locked(ep, [&] { return ssize_t(ep->getopt(level, name, val, len)); }));
}
int pm_ep_setopt(fid_t f, int level, int name, const void* val, size_t len) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return int(locked(ep, [&] { return ssize_t(ep->setopt(level, name, val, len)); }));
}
ssize_t pm_ep_size_left(fid_ep* f) noexcept { return 1; }

int pm_ep_close(fid_t f) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return guard([&] {
    Domain& dom = ep->domain();
    {
      std::lock_guard<std::mutex> g(dom.lock());
      ep->close();
    }
    delete ep;
    dom.refs--;
    return 0;
  });
}
int pm_ep_bind(fid_t f, fid_t bf, uint64_t flags) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return int(locked(ep, [&] { return ssize_t(ep->bind(bf, flags)); }));
}
int pm_ep_control(fid_t f, int cmd, void* arg) noexcept {
  Endpoint* ep = Endpoint::from(f);
  if (cmd == FI_ENABLE) return int(locked(ep, [&] { return ssize_t(ep->enable()); }));
  return -FI_ENOSYS;
}
int pm_ep_getname(fid_t f, void* addr, size_t* len) noexcept {
  Endpoint* ep = Endpoint::from(f);
  return int(locked(ep, [&] { return ssize_t(ep->getname(addr, len)); }));
}

}  // namespace

extern const fi_ops kEpFiOps = {
    .size = ops_size<fi_ops>(),
    .close = pm_ep_close,
    .bind = pm_ep_bind,
    .control = pm_ep_control,
    .ops_open = PM_ENOSYS(fi_ops, ops_open),
    .tostr = PM_ENOSYS(fi_ops, tostr),
    .ops_set = PM_ENOSYS(fi_ops, ops_set),
};

extern const fi_ops_ep kEpOps = {
    .size = ops_size<fi_ops_ep>(),
    .cancel = pm_ep_cancel,
    .getopt = pm_ep_getopt,
    .setopt = pm_ep_setopt,
    .tx_ctx = PM_ENOSYS(fi_ops_ep, tx_ctx),
    .rx_ctx = PM_ENOSYS(fi_ops_ep, rx_ctx),
    .rx_size_left = pm_ep_size_left,
    .tx_size_left = pm_ep_size_left,
};

extern const fi_ops_cm kEpCmOps = {
    .size = ops_size<fi_ops_cm>(),
    .setname = PM_ENOSYS(fi_ops_cm, setname),
    .getname = pm_ep_getname,
    .getpeer = PM_ENOSYS(fi_ops_cm, getpeer),
    .connect = PM_ENOSYS(fi_ops_cm, connect),
    .listen = PM_ENOSYS(fi_ops_cm, listen),
    .accept = PM_ENOSYS(fi_ops_cm, accept),
    .reject = PM_ENOSYS(fi_ops_cm, reject),
    .shutdown = PM_ENOSYS(fi_ops_cm, shutdown),
    .join = PM_ENOSYS(fi_ops_cm, join),
};

extern const fi_ops_msg kEpMsgOps = {
    .size = ops_size<fi_ops_msg>(),
    .recv = pm_ep_recv,
    .recvv = pm_ep_recvv,
    .recvmsg = pm_ep_recvmsg,
    .send = pm_ep_send,
    .sendv = pm_ep_sendv,
    .sendmsg = pm_ep_sendmsg,
    .inject = pm_ep_inject,
    .senddata = pm_ep_senddata,
    .injectdata = pm_ep_injectdata,
};

extern const fi_ops_tagged kEpTaggedOps = {
    .size = ops_size<fi_ops_tagged>(),
    .recv = pm_ep_trecv,
    .recvv = pm_ep_trecvv,
    .recvmsg = pm_ep_trecvmsg,
    .send = pm_ep_tsend,
    .sendv = pm_ep_tsendv,
    .sendmsg = pm_ep_tsendmsg,
    .inject = pm_ep_tinject,
    .senddata = pm_ep_tsenddata,
    .injectdata = pm_ep_tinjectdata,
};

fi_ops_rma kEpRmaOps = {
    .size = ops_size<fi_ops_rma>(),
    .read = PM_ENOSYS(fi_ops_rma, read),
    .readv = PM_ENOSYS(fi_ops_rma, readv),
    .readmsg = PM_ENOSYS(fi_ops_rma, readmsg),
    .write = PM_ENOSYS(fi_ops_rma, write),
    .writev = PM_ENOSYS(fi_ops_rma, writev),
    .writemsg = PM_ENOSYS(fi_ops_rma, writemsg),
    .inject = PM_ENOSYS(fi_ops_rma, inject),
    .writedata = PM_ENOSYS(fi_ops_rma, writedata),
    .injectdata = PM_ENOSYS(fi_ops_rma, injectdata),
};

fi_ops_atomic kEpAtomicOps = {
    .size = ops_size<fi_ops_atomic>(),
    .write = PM_ENOSYS(fi_ops_atomic, write),
    .writev = PM_ENOSYS(fi_ops_atomic, writev),
    .writemsg = PM_ENOSYS(fi_ops_atomic, writemsg),
    .inject = PM_ENOSYS(fi_ops_atomic, inject),
    .readwrite = PM_ENOSYS(fi_ops_atomic, readwrite),
    .readwritev = PM_ENOSYS(fi_ops_atomic, readwritev),
    .readwritemsg = PM_ENOSYS(fi_ops_atomic, readwritemsg),
    .compwrite = PM_ENOSYS(fi_ops_atomic, compwrite),
    .compwritev = PM_ENOSYS(fi_ops_atomic, compwritev),
    .compwritemsg = PM_ENOSYS(fi_ops_atomic, compwritemsg),
    .writevalid = PM_ENOSYS(fi_ops_atomic, writevalid),
    .readwritevalid = PM_ENOSYS(fi_ops_atomic, readwritevalid),
    .compwritevalid = PM_ENOSYS(fi_ops_atomic, compwritevalid),
};

fi_ops_collective kEpCollOps = {
    .size = ops_size<fi_ops_collective>(),
    .barrier = PM_ENOSYS(fi_ops_collective, barrier),
    .broadcast = PM_ENOSYS(fi_ops_collective, broadcast),
    .alltoall = PM_ENOSYS(fi_ops_collective, alltoall),
    .allreduce = PM_ENOSYS(fi_ops_collective, allreduce),
    .allgather = PM_ENOSYS(fi_ops_collective, allgather),
    .reduce_scatter = PM_ENOSYS(fi_ops_collective, reduce_scatter),
    .reduce = PM_ENOSYS(fi_ops_collective, reduce),
    .scatter = PM_ENOSYS(fi_ops_collective, scatter),
    .gather = PM_ENOSYS(fi_ops_collective, gather),
    .msg = PM_ENOSYS(fi_ops_collective, msg),
    .barrier2 = PM_ENOSYS(fi_ops_collective, barrier2),
};

}  // namespace pm
