// ft_msgrate: small-message rate (default 8 B) with a window of W messages,
// using fi_tinject (-m inject, default) or fi_tsend (-m send).
//   ft_msgrate -p <prov> [-m inject|send] [-S size] [-W window] [-n windows] [-c cpus] [-v] [--short]
#include "ft_bench.h"

int main(int argc, char** argv) {
    ft::parse_options(argc, argv);
    const std::string mode = ft::g_opt.mode.empty() ? "inject" : ft::g_opt.mode;
    if (mode != "inject" && mode != "send") {
        std::fprintf(stderr, "ft_msgrate: -m must be inject or send\n");
        return 2;
    }
    ft::set_identity("", "msgrate_" + mode, -1);
    ft::run_stream_bench("msgrate_" + mode, mode == "inject" ? ft::StreamOp::kTInject : ft::StreamOp::kTSend, {8},
                         256, 2000, 5);
}
