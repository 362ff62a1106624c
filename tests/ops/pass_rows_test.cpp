// A prefill pass's K=V rows decoded once (sm90_pass_rows + sm90_kv_unpack, AttnIndexArgs::pass_local): the local
// lists must name exactly the pool rows the pool lists name, and attention over the decoded rows must give the bits
// of attention over the packed pool. SWA, CSA (picks with -1) and HCA lists, a first pass (no ring) and a later one
// (ring rows of older positions), the session in a middle slot with shuffled entry pages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/glue/glue.h"
#include "backend/cuda/kernels/kv_store/kv_store.h"
#include "ops/gpu_testing.h"
#include "testing/testing.h"

namespace dsv4::cuda {
namespace {

using backend::Precision;
using namespace dsv4::cuda::testing;

TEST(PassRows, LocalListsNameThePoolRowsAndAttendTheSame) {
    DSV4_REQUIRE_GPU();
    const Precision prec = Precision::kReference;
    std::mt19937_64 rng(fresh_seed());
    // n >= kSparseAttnPrefillMinTokens: both attention calls take the wgmma prefill kernel (packed / bf16 producer)
    const int64_t n = 300, window = 128, row0 = 16, R = row0 + n + 8, sessions = 3, H = 64, D = 512, topk = 64;
    const int32_t slot = 1;
    const auto freqs = backend::rope_freqs(160000, 16, 65536, 32, 1);
    for (const int64_t ratio : {int64_t(0), int64_t(4), int64_t(128)}) {
        for (const int64_t p0 : {int64_t(0), int64_t(200)}) {
            SCOPED_TRACE("ratio " + std::to_string(ratio) + " p0 " + std::to_string(p0));
            const bool csa = ratio == 4, hca = ratio == 128;
            const int64_t n_entries = ratio ? (p0 + n) / ratio : 0;
            const int64_t pps = std::max<int64_t>(1, (n_entries + 63) / 64);
            const int64_t entry_base = R + window * sessions, pool_rows = entry_base + 64 * sessions * pps;
            std::vector<int32_t> table(static_cast<size_t>(sessions * pps));
            std::iota(table.begin(), table.end(), 0);
            std::shuffle(table.begin(), table.end(), rng);
            std::vector<int64_t> pos(static_cast<size_t>(n));
            std::iota(pos.begin(), pos.end(), p0);
            std::vector<int32_t> picks(static_cast<size_t>(n * topk), -1);
            if (csa) {
                for (int64_t i = 0; i < n; ++i) {
                    const int64_t visible = (pos[size_t(i)] + 1) / 4;
                    for (int64_t c = 0; c < std::min(topk, visible); ++c)
                        picks[size_t(i * topk + c)] = c % 7 == 3 ? -1 : int32_t(rng() % uint64_t(visible));
                }
            }
            const int64_t width = window + (csa ? topk : hca ? n_entries : 0);
            const int64_t local = pass_local_rows(n, window, n_entries);

            auto dtable = to_device(table);
            auto dpos = to_device(pos);
            auto dpicks = to_device(picks);
            auto didx_pool = poisoned<int32_t>(size_t(n * width));
            auto didx_local = poisoned<int32_t>(size_t(n * width));
            auto dsrc = poisoned<int32_t>(size_t(local));
            ASSERT_TRUE(dtable.is_ok() && dpos.is_ok() && dpicks.is_ok() && didx_pool.is_ok() && didx_local.is_ok() &&
                        dsrc.is_ok());
            PagedEntries entries{entry_base, dtable->as<int32_t>(), pps};
            AttnIndexArgs ia;
            ia.n = n, ia.win_cols = window, ia.window = window, ia.positions = dpos->as<int64_t>();
            ia.p0 = p0, ia.row0 = row0, ia.slot = slot, ia.pass_rows = R;
            if (ratio) ia.entries = entries;
            ia.picks = csa ? dpicks->as<int32_t>() : nullptr;
            ia.topk = csa ? topk : 0;
            ia.hca_entries = hca ? n_entries : 0;
            ia.ratio = ratio;
            ia.idx = didx_pool->as<int32_t>();
            DSV4_ASSERT_OK(sm90_attn_index(ia, nullptr));
            ia.idx = didx_local->as<int32_t>(), ia.pass_local = true;
            DSV4_ASSERT_OK(sm90_attn_index(ia, nullptr));
            PassRowsArgs pr;
            pr.rows = dsrc->as<int32_t>();
            pr.n = n, pr.window = window, pr.row0 = row0, pr.pass_rows = R, pr.n_entries = n_entries, pr.slot = slot;
            pr.entries = entries;
            DSV4_ASSERT_OK(sm90_pass_rows(pr, nullptr));

            const auto idx_pool = to_host<int32_t>(*didx_pool, size_t(n * width));
            const auto idx_local = to_host<int32_t>(*didx_local, size_t(n * width));
            const auto src = to_host<int32_t>(*dsrc, size_t(local));
            for (const int32_t r : src) ASSERT_TRUE(r >= 0 && r < pool_rows) << "local row source " << r;
            int64_t named = 0;
            for (size_t i = 0; i < idx_pool.size(); ++i) {
                ASSERT_EQ(idx_local[i] < 0, idx_pool[i] < 0) << "list entry " << i;
                if (idx_pool[i] < 0) continue;
                ASSERT_LT(idx_local[i], local) << "list entry " << i;
                ASSERT_EQ(src[size_t(idx_local[i])], idx_pool[i]) << "list entry " << i;
                ++named;
            }
            EXPECT_GT(named, n * 64);  // the lists name rows (at least the window's)

            // attention over the packed pool and over the rows decoded once: the same bits
            auto kv = random_act(prec, rng, size_t(pool_rows * D), 1.0f);
            DSV4_ASSERT_OK(backend::cpu::kv_fp8_sim({prec, &pool()}, {kv.data(), pool_rows, D, 64}));
            auto q = random_act(prec, rng, size_t(n * H * D), 1.0f);
            std::vector<float> sink(static_cast<size_t>(H));
            for (auto& v : sink) v = float(int(rng() % 2001) - 1000) / 500.0f;
            auto dkv = act_to_device(prec, kv);
            auto dq = act_to_device(prec, q);
            auto dsink = to_device(sink);
            auto dpacked = poisoned<uint8_t>(size_t(pool_rows * kv_row_bytes(prec)));
            auto drows = act_poisoned(prec, size_t(local * D));
            auto out_pool = act_poisoned(prec, size_t(n * H * D));
            auto out_local = act_poisoned(prec, size_t(n * H * D));
            ASSERT_TRUE(dkv.is_ok() && dq.is_ok() && dsink.is_ok() && dpacked.is_ok() && drows.is_ok() &&
                        out_pool.is_ok() && out_local.is_ok());
            DSV4_ASSERT_OK(sm90_kv_pack(prec, {dkv->data(), pool_rows, nullptr, 0, dpacked->data()}, nullptr));
            DSV4_ASSERT_OK(sm90_kv_unpack(prec, dpacked->data(), dsrc->as<int32_t>(), local, drows->data(), nullptr));
            SparseAttnArgs a;
            a.q = dq->data(), a.kv = dpacked->data(), a.kv_packed = true, a.idx = didx_pool->as<int32_t>();
            a.tokens = n, a.heads = H, a.n_kv = pool_rows, a.topk = width;
            a.sink = dsink->as<float>(), a.scale = 1.0f / std::sqrt(512.0f);
            a.derotate = true, a.positions = dpos->as<int64_t>(), a.freqs = freqs, a.out = out_pool->data();
            ASSERT_TRUE(sparse_attn_takes_prefill_kernel(prec, a));
            DSV4_ASSERT_OK(sm90_sparse_attn(prec, a, nullptr));
            a.kv = drows->data(), a.kv_packed = false, a.n_kv = local;
            a.idx = didx_local->as<int32_t>(), a.out = out_local->data();
            DSV4_ASSERT_OK(sm90_sparse_attn(prec, a, nullptr));
            const size_t diff = differing_bytes(*out_pool, *out_local, size_t(n * H * D) * 2);
            EXPECT_EQ(diff, 0u) << "attention over the rows decoded once changed " << diff << " output bytes";
        }
    }
}

TEST(PassRows, BadArgumentsAreClearErrors) {
    DSV4_REQUIRE_GPU();
    auto rows = poisoned<int32_t>(1024);
    ASSERT_TRUE(rows.is_ok());
    PassRowsArgs ok;
    ok.rows = rows->as<int32_t>(), ok.n = 100, ok.window = 128, ok.row0 = 0, ok.pass_rows = 100;
    EXPECT_TRUE(sm90_pass_rows(ok, nullptr).is_ok());
    PassRowsArgs past = ok;
    past.row0 = 1;  // the pass's rows end past the pass row region
    EXPECT_EQ(sm90_pass_rows(past, nullptr).code(), StatusCode::kInvalidArgument);
    PassRowsArgs no_table = ok;
    no_table.n_entries = 5;
    EXPECT_EQ(sm90_pass_rows(no_table, nullptr).code(), StatusCode::kInvalidArgument);
    int64_t pos = 0;
    AttnIndexArgs ia;
    ia.idx = rows->as<int32_t>(), ia.n = 1, ia.win_cols = 1, ia.positions = &pos, ia.decode = true;
    auto slots = poisoned<int32_t>(1);
    ASSERT_TRUE(slots.is_ok());
    ia.slots = slots->as<int32_t>(), ia.pass_local = true;
    const Status s = sm90_attn_index(ia, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("prefill"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dsv4::cuda
