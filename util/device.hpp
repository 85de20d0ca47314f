// The device interface (PMv2's "PM device"): moves packets to a peer
// endpoint, reliably and in order per peer, and optionally copies straight
// between the two processes' memory (single copy). The message protocols
// above it (eager, segmentation, rendezvous, matching, completions) live once
// in core/ and do not know which device carries them.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include <rdma/fi_errno.h>

#include "core/packet.hpp"

namespace pm {

using PeerId = uint32_t;
constexpr PeerId kNoPeer = UINT32_MAX;

// What a device hands up for each received packet.
struct RxPacket {
  PeerId peer;
  const PktHdr* hdr;     // in the device's own memory (a peer cannot change it)
  const void* payload;   // valid only during the callback
  size_t payload_len;
};

class PacketSink {
 public:
  // Returns true when the packet was taken. false means "no room now"
  // (the endpoint's unexpected-message memory is at its cap): the device
  // keeps the packet, offers it again on a later poll, and holds back
  // what follows it from the same peer (per-peer FIFO), telling the sender
  // to wait (STOP/GO) rather than dropping anything.
  virtual bool on_packet(const RxPacket& pkt) noexcept = 0;
  // The session with `peer` was reset (the peer restarted, or it was
  // unreachable and came back): operations of the old session must fail,
  // messages cut by it must complete with an error. Called from poll().
  virtual void on_peer_reset(PeerId peer) noexcept {}

 protected:
  ~PacketSink() = default;
};

class Device {
 public:
  virtual ~Device() = default;

  // This endpoint's name, as fi_getname returns it.
  virtual const void* name() const noexcept = 0;
  virtual size_t name_len() const noexcept = 0;
  // A readable form of any name of this device's format ("" if malformed).
  virtual std::string name_str(const void* name, size_t len) const = 0;

  // Maps a peer name to a small peer id (dense in a device; the composite's
  // interleave its two devices' ids: the core's per-peer state is a vector
  // indexed by it); no I/O, fails only on a malformed
  // name (kNoPeer). The same peer always gets the same id, whether it was
  // resolved from an AV insert or first seen as a sender.
  virtual PeerId resolve(const void* name, size_t len) noexcept = 0;
  // The name of a peer id (for FI_SOURCE lookups); nullptr if unknown.
  virtual const void* peer_name(PeerId peer, size_t* len) const noexcept = 0;

  // Largest payload of one packet: to any peer, and to this one.
  virtual size_t max_payload() const noexcept = 0;
  virtual size_t max_payload(PeerId) const noexcept { return max_payload(); }
  // Largest payload of one packet with this header to this peer (its
  // seg_len aside): at least max_payload(peer), more where the device
  // encodes this header in fewer bytes than its longest (pmeth's frames).
  // Headers that differ only in their offset get the same answer while
  // their offsets are on the same side of 4 GiB (the core asks once per
  // run of a message's frames, SegLimit).
  virtual size_t max_payload(PeerId peer, const PktHdr&) const noexcept { return max_payload(peer); }
  // Largest payload of one packet taken from this peer: more than what is
  // sent to it where the peer may send larger ones (pmeth's GSO mode sends
  // 42 bytes less per frame to peers in it; a peer may not know yet, or
  // ever, that we are).
  virtual size_t rx_max_payload(PeerId peer) const noexcept { return max_payload(peer); }

  // Sends one packet: 0, -FI_EAGAIN (no room now; retry), or an error that
  // means the peer cannot be reached (-FI_EHOSTUNREACH, -FI_ECONNRESET).
  virtual int send(PeerId peer, const PktHdr& hdr, const struct iovec* iov,
                   size_t iovcnt, size_t offset, size_t len) noexcept = 0;

  // send(), where the device may instead read the payload from the
  // caller's buffers for as long as the packet may be sent again: 1 when it
  // did (the caller keeps the buffers unchanged until tx_state() is no
  // longer 0 for a ticket taken after this packet), 0 when it copied, or
  // what send() returns. Devices that cannot gather always copy.
  virtual int send_ref(PeerId peer, const PktHdr& hdr, const struct iovec* iov, size_t iovcnt, size_t offset,
                       size_t len) noexcept {
    return send(peer, hdr, iov, iovcnt, offset, len);
  }

  // The caller waits for the acknowledgement of what it sent to `peer`
  // (send_ref's buffers): ask the peer for it now, not after its
  // delayed-ACK time.
  virtual void want_ack(PeerId) noexcept {}

  // Hands packets queued by send() to the hardware (end of a burst).
  virtual void flush() noexcept {}

  // Delivery tracking for devices that acknowledge: the ticket of the last
  // packet sent to `peer`, and whether it arrived (1), is in flight (0) or
  // never will (negative FI_E* code). Devices that deliver at send time
  // (shared memory) report everything arrived.
  virtual uint64_t tx_ticket(PeerId peer) const noexcept { return 0; }
  virtual int tx_state(PeerId peer, uint64_t ticket) noexcept { return 1; }

  // Delivers up to `budget` received packets to the sink; returns how many.
  // An empty poll is a read of local memory.
  virtual int poll(PacketSink& sink, int budget) noexcept = 0;
  // Time has passed without polls (the progress helper): devices that
  // check their timers only every so many empty polls do on the next one.
  virtual void tick() noexcept {}
  // Earliest time (now_ns() clock) a timer of the device is due: the
  // progress helper sleeps at most until then. UINT64_MAX: no timer.
  virtual uint64_t next_timer_ns() const noexcept { return UINT64_MAX; }

  // Messages to `peer` above this many bytes go by rendezvous, where `thr`
  // is the endpoint's threshold (FI_<PROV>_RNDV_THRESHOLD). A device whose
  // rendezvous saves no copy (no single-copy path to the peer) may name a
  // larger one: its round trip then only spares the receiver buffering an
  // unexpected message, which the endpoint's cap bounds anyway.
  virtual size_t rndv_threshold(PeerId peer, size_t thr) const noexcept { return thr; }

  // Single copy: reads the peer's memory (`remote`, in its address space)
  // into `local`. -FI_ENOSYS when this peer cannot be read directly.
  virtual bool can_read_remote(PeerId peer) noexcept { return false; }
  // A rendezvous of len bytes: read it in one copy (true) or have it
  // streamed through the copy path (false). The device may learn which is
  // faster here from note_transfer.
  virtual bool prefer_read_remote(PeerId peer, size_t len) noexcept { return can_read_remote(peer); }
  // A rendezvous of len bytes was delivered (by single copy or the copy path).
  virtual void note_transfer(PeerId peer, bool single_copy, size_t len) noexcept {}
  virtual ssize_t read_remote(PeerId peer, const struct iovec* local, size_t lcnt,
                              const struct iovec* remote, size_t rcnt) noexcept {
    return -FI_ENOSYS;
  }

  // Single copy the other way: writes `local` into the peer's memory.
  virtual ssize_t write_remote(PeerId peer, const struct iovec* local, size_t lcnt,
                               const struct iovec* remote, size_t rcnt) noexcept {
    return -FI_ENOSYS;
  }

  // Liveness of a peer with operations outstanding (slow path, may syscall).
  virtual bool peer_alive(PeerId peer) noexcept = 0;

  // Endpoint close: acknowledges at once what arrived, and says whether
  // everything this device sent has been acknowledged (or never will be)
  // and the peers have gone quiet, so the endpoint may go. Called between
  // polls until true or the close timeout.
  virtual bool close_drained() noexcept { return true; }

  // Blocking waits: the fd becomes readable when a packet arrives while armed.
  virtual int wait_fd() const noexcept = 0;
  virtual void arm_wait(bool armed) noexcept = 0;
  virtual void drain_wait() noexcept = 0;

  // Statistics, for the close-time report and the live statistics page:
  // the device's line, and per-peer lines for at most max_peers peers,
  // appended to out. Once out has the capacity, appending allocates nothing
  // (the page is published from fi_cq_read).
  virtual void append_stats(std::string& out, size_t max_peers) const {}
  std::string stats(size_t max_peers = SIZE_MAX) const {
    std::string s;
    append_stats(s, max_peers);
    return s;
  }

  // Inside another device (the composite): the ids this device hands up
  // through a PacketSink become (id << shift) | tag, the enclosing device's
  // ids, so that packets go up with no renaming between; calls down still
  // name peers by this device's own ids. tag < (1 << shift).
  void set_up_ids(unsigned shift, PeerId tag) noexcept {
    up_shift_ = shift;
    up_tag_ = tag;
  }
  // A peer's id as handed up (kNoPeer for kNoPeer, or if it has none in the
  // enclosing space).
  PeerId up_id(PeerId id) const noexcept {
    return id < kNoPeer >> up_shift_ ? (id << up_shift_ | up_tag_) : kNoPeer;
  }

 private:
  unsigned up_shift_ = 0;
  PeerId up_tag_ = 0;
};

} // namespace pm
