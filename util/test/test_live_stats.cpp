// core/live_stats.*: the statistics text into pmstat's page.
#include <criterion/criterion.h>

#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "core/live_stats.hpp"

namespace {
const pmstat_counter* find(const pmstat_page& p, const char* name) {
  for (uint32_t i = 0; i < p.ncounters; i++)
    if (strcmp(p.counters[i].name, name) == 0) return &p.counters[i];
  return nullptr;
}
uint64_t value(const pmstat_page& p, const char* name) {
  const pmstat_counter* c = find(p, name);
  cr_assert(c, "no counter %s", name);
  return c->value;
}
}  // namespace

Test(live_stats, composite_text_becomes_sectioned_counters_and_peers) {
  auto p = std::make_unique<pmstat_page>();
  memset(p.get(), 0, sizeof *p);
  std::string text =
      "endpoint: bad_packets=3 unexp_bytes=10\n"
      "composite: 2 peers through shared memory, 5 through Ethernet\n"
      " shm: pmshm://0/aa@01 tx_pkts=7 rndv_copy=1\n"
      " eth: pmeth://02:00:00:00:00:01/1234@01;shm=99 wire=af_packet/broker rail0: up tx_frames=11 rx_frames=12; "
      "rail1: down tx_frames=0; drops: bad_csum=4 tx_ring_full=2\n"
      "  peer pmeth://02:00:00:00:00:02/5678@02;shm=1: tx_frames=9 retrans=1 srtt_us=40\n"
      "  peer pmeth://02:00:00:00:00:03/9abc@03;shm=2: tx_frames=2 retrans=0 srtt_us=50";
  pm::parse_stats_text(text, p.get());
  cr_assert_eq(value(*p, "endpoint.bad_packets"), 3u);
  cr_assert_eq(value(*p, "composite.shm_peers"), 2u);
  cr_assert_eq(value(*p, "composite.eth_peers"), 5u);
  cr_assert_eq(value(*p, "shm.tx_pkts"), 7u);
  cr_assert_eq(value(*p, "eth.rail0.up"), 1u);
  cr_assert_eq(value(*p, "eth.rail0.tx_frames"), 11u);
  cr_assert_eq(value(*p, "eth.rail0.rx_frames"), 12u);
  cr_assert_eq(value(*p, "eth.rail1.up"), 0u);
  cr_assert_eq(value(*p, "eth.drops.bad_csum"), 4u);
  cr_assert_str_eq(p->wire, "af_packet/broker");
  cr_assert_str_eq(p->address, "pmeth://02:00:00:00:00:01/1234@01;shm=99", "pmeth's own name, not its shm device's");
  cr_assert_eq(p->npeers, 2u);
  cr_assert_eq(p->peers_total, 2u);
  cr_assert_str_eq(p->peers[1].address, "pmeth://02:00:00:00:00:03/9abc@03;shm=2");
  cr_assert_eq(p->peers[0].nfields, 3u);
  cr_assert_str_eq(p->peers[0].fields[1].name, "retrans");
  cr_assert_eq(p->peers[0].fields[1].value, 1u);
}

Test(live_stats, plain_device_lines_get_their_section_from_the_scheme) {
  auto p = std::make_unique<pmstat_page>();
  memset(p.get(), 0, sizeof *p);
  pm::parse_stats_text("endpoint: bad_packets=0\npmshm://0/ab@01 tx_pkts=5 cma_reads=2", p.get());
  cr_assert_eq(value(*p, "shm.tx_pkts"), 5u);
  cr_assert_eq(value(*p, "shm.cma_reads"), 2u);
}

Test(live_stats, counts_and_lengths_are_bounded) {
  auto p = std::make_unique<pmstat_page>();
  memset(p.get(), 0, sizeof *p);
  std::string text = "endpoint:";
  for (int i = 0; i < 1000; i++) text += " k" + std::to_string(i) + "=" + std::to_string(i);
  text += " " + std::string(500, 'x') + "=1 junk= =5 big=123456789012345678901234 neg=-1\n";
  for (int i = 0; i < 200; i++) {
    text += "  peer pmeth://" + std::string(300, 'a') + ":";
    for (int k = 0; k < 40; k++) text += " f" + std::to_string(k) + "=1";
    text += "\n";
  }
  text += "  peer without colon\n";
  pm::parse_stats_text(text, p.get());
  cr_assert_eq(p->ncounters, uint32_t(PMSTAT_MAX_COUNTERS));
  cr_assert_eq(p->npeers, uint32_t(PMSTAT_MAX_PEERS));
  cr_assert_eq(p->peers_total, 201u);
  for (uint32_t i = 0; i < p->npeers; i++) {
    cr_assert_eq(p->peers[i].nfields, uint32_t(PMSTAT_MAX_PEER_FIELDS));
    cr_assert(memchr(p->peers[i].address, 0, PMSTAT_TEXT_LEN), "peer address terminated");
  }
  for (uint32_t i = 0; i < p->ncounters; i++) cr_assert(memchr(p->counters[i].name, 0, PMSTAT_NAME_LEN));
}

Test(live_stats, names_are_joined_and_cut_values_saturate) {
  auto p = std::make_unique<pmstat_page>();
  memset(p.get(), 0, sizeof *p);
  std::string longname(100, 'n');
  pm::parse_stats_text("eth: x rail3: " + longname + "=7 big=99999999999999999999 max=18446744073709551615\t"
                       "tab=2\r\n",
                       p.get());
  cr_assert_eq(p->ncounters, 4u);
  std::string want = ("eth.rail3." + longname).substr(0, PMSTAT_NAME_LEN - 1);
  cr_assert_str_eq(p->counters[0].name, want.c_str());
  cr_assert_eq(p->counters[0].value, 7u);
  cr_assert_eq(value(*p, "eth.rail3.big"), UINT64_MAX, "20 digits past 2^64-1 saturate");
  cr_assert_eq(value(*p, "eth.rail3.max"), UINT64_MAX);
  cr_assert_eq(value(*p, "eth.rail3.tab"), 2u, "tabs and a CR separate words");
}

Test(live_stats, a_page_is_published_and_removed) {
  auto ls = pm::LiveStats::create("pmtest");
  cr_assert(ls, "a page in /dev/shm");
  std::string path = ls->path();
  cr_assert_eq(access(path.c_str(), F_OK), 0);
  ls->publish("endpoint: bad_packets=42");
  FILE* f = fopen(path.c_str(), "rb");
  cr_assert(f);
  auto p = std::make_unique<pmstat_page>();
  cr_assert_eq(fread(p.get(), 1, sizeof *p, f), sizeof *p);
  fclose(f);
  cr_assert_eq(p->magic, PMSTAT_MAGIC);
  cr_assert_eq(p->pid, int32_t(getpid()));
  cr_assert_eq(p->seq % 2, 0u);
  cr_assert_eq(p->updates, 1u);
  cr_assert_str_eq(p->provider, "pmtest");
  cr_assert_eq(value(*p, "endpoint.bad_packets"), 42u);
  ls.reset();
  cr_assert_neq(access(path.c_str(), F_OK), 0, "removed at close");
}
