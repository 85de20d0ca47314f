// ft_msgrate: small-message rate (default 8 B) with a window of W messages,
// using fi_tinject (-m inject, default), fi_tsend (-m send) or fi_tsendmsg
// with FI_MORE on all but the window's last send (-m more).
//   ft_msgrate -p <prov> [-m inject|send|more] [-S size] [-W window] [-n windows] [-c cpus] [-v] [--short]
#include "ft_bench.h"

int main(int argc, char** argv) {
    ft::parse_options(argc, argv);
    const std::string mode = ft::g_opt.mode.empty() ? "inject" : ft::g_opt.mode;
    if (mode != "inject" && mode != "send" && mode != "more") {
        std::fprintf(stderr, "ft_msgrate: -m must be inject, send or more\n");
        return 2;
    }
    ft::set_identity("", "msgrate_" + mode, -1);
    ft::run_stream_bench("msgrate_" + mode, mode == "inject" ? ft::StreamOp::kTInject
                         : mode == "more" ? ft::StreamOp::kTSendMore : ft::StreamOp::kTSend, {8},
                         256, 2000, 5);
}
