#include "official_fixture.h"

#include <cmath>
#include <mutex>

namespace dsv4::official {

std::filesystem::path fixture_dir() { return testing::test_data_dir() / "official_ops"; }

backend::Exec exec_ref() {
    static ThreadPool pool(4);
    return {backend::Precision::kReference, &pool};
}

const Model& model_or_fail(std::string* error) {
    static std::once_flag once;
    static Model m;
    static std::string err;
    std::call_once(once, [] {
        auto ck = io::Checkpoint::open(fixture_dir() / "ds");
        if (!ck.is_ok()) { err = ck.status().to_string(); return; }
        m.ckpt = std::move(ck.value());
        auto cfg = model::load_config(fixture_dir() / "ds");
        if (!cfg.is_ok()) { err = cfg.status().to_string(); return; }
        m.config = cfg.value();
        auto w = model::map_weights(*m.ckpt, m.config);
        if (!w.is_ok()) { err = w.status().to_string(); return; }
        m.weights = std::move(w.value());
    });
    *error = err;
    return m;
}

const io::NpzFile* fixture(const std::string& file, std::string* error) {
    static std::mutex mu;
    static std::map<std::string, std::unique_ptr<io::NpzFile>> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(file);
    if (it != cache.end()) return it->second.get();
    auto z = io::NpzFile::read(fixture_dir() / file);
    if (!z.is_ok()) {
        *error = z.status().to_string();
        return nullptr;
    }
    auto& slot = cache[file];
    slot = std::make_unique<io::NpzFile>(std::move(z.value()));
    return slot.get();
}

void expect_close(const std::string& where, const std::string& array, std::span<const float> mine,
                  std::span<const float> ref, Tol tol) {
    ASSERT_EQ(mine.size(), ref.size()) << where << " " << array;
    auto c = testing::compare(mine, ref);
    size_t differ = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const bool both_nan = std::isnan(mine[i]) && std::isnan(ref[i]);
        if (!(mine[i] == ref[i]) && !both_nan) ++differ;
    }
    const double frac = ref.empty() ? 0 : double(differ) / double(ref.size());
    std::printf("[official] %-10s %-14s rel_l2 %.3e  differing %.4f%%  (bar %.0e / %s)\n", where.c_str(),
                array.c_str(), c.rel_l2, 100 * frac, tol.rel_l2,
                tol.frac < 0 ? "-" : (std::to_string(100 * tol.frac) + "%").c_str());
    EXPECT_EQ(c.nonfinite, 0u) << where << " " << array << "\n" << c.report;
    EXPECT_LE(c.rel_l2, tol.rel_l2) << where << " " << array << "\n" << c.report;
    if (tol.frac >= 0) {
        EXPECT_LE(frac, tol.frac) << where << " " << array << " differing fraction";
    }
}

std::vector<float> f32_of(const io::NpzFile& z, const std::string& name) {
    const io::NpyArray* a = z.find(name);
    EXPECT_NE(a, nullptr) << z.label() << ": " << name;
    return a ? a->to_f32() : std::vector<float>{};
}

std::vector<int32_t> i32_of(const io::NpzFile& z, const std::string& name) {
    const io::NpyArray* a = z.find(name);
    EXPECT_NE(a, nullptr) << z.label() << ": " << name;
    return a ? a->to_i32() : std::vector<int32_t>{};
}

backend::WeightView view(const model::WeightRef& w) {
    auto v = backend::weight_view(w);
    EXPECT_TRUE(v.is_ok()) << v.status().to_string();
    return v.is_ok() ? v.value() : backend::WeightView{};
}

}  // namespace dsv4::official
