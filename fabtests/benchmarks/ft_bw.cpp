// ft_bw: one-way bandwidth with a window of W outstanding fi_tsend.
//   ft_bw -p <prov> [-S size] [-W window] [-n windows] [-c cpu0,cpu1] [-v] [--short]
#include "ft_bench.h"

int main(int argc, char** argv) {
    ft::parse_options(argc, argv);
    ft::set_identity("", "bw", -1);
    ft::run_stream_bench("bw", ft::StreamOp::kTSend, {4096, 65536, 1u << 20}, 64, 200, 3);
}
