// make-model (see make_model.h): random values per logical tensor, encoded per layout, written shard by shard.
#include "model/make_model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <numbers>
#include <numeric>
#include <system_error>

#include "core/formats.h"
#include "core/quant_formats.h"
#include "io/safetensors.h"

namespace dsv4::model {
namespace {

// ---- deterministic random numbers (own generator: the same values on every platform and standard library) ----

uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
    return h;
}

// xoshiro256** seeded through splitmix64 (the seeding its authors recommend).
class Rng {
public:
    Rng(uint64_t seed, const std::string& name) {
        uint64_t s = seed ^ fnv1a(name);
        for (uint64_t& w : s_) w = splitmix64(s);
    }
    uint64_t next() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
    uint64_t below(uint64_t n) { return next() % n; }  // bias < n / 2^64: irrelevant here
    // Standard normal by Box-Muller, both outputs used.
    double normal() {
        if (have_spare_) {
            have_spare_ = false;
            return spare_;
        }
        const double u1 = 1.0 - uniform(), u2 = uniform();  // u1 in (0, 1]
        const double r = std::sqrt(-2.0 * std::log(u1));
        spare_ = r * std::sin(2.0 * std::numbers::pi * u2);
        have_spare_ = true;
        return r * std::cos(2.0 * std::numbers::pi * u2);
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t s_[4];
    double spare_ = 0;
    bool have_spare_ = false;
};

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

int64_t numel(const std::vector<int64_t>& shape) {
    return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

// ---- byte encodings ----

using Bytes = std::vector<uint8_t>;

Bytes bf16_bytes(const std::vector<float>& v) {
    Bytes b(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t h = f32_to_bf16(v[i]);
        b[2 * i] = static_cast<uint8_t>(h);
        b[2 * i + 1] = static_cast<uint8_t>(h >> 8);
    }
    return b;
}

template <typename T>
Bytes raw_bytes(const std::vector<T>& v) {
    Bytes b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());  // little-endian host (x86-64, aarch64)
    return b;
}

std::vector<float> ue8m0_as_f32(const Bytes& scales) {
    std::vector<float> f(scales.size());
    for (size_t i = 0; i < scales.size(); ++i) f[i] = e8m0_to_f32(scales[i]);
    return f;
}

// Encoded parts of one logical tensor in the official layout, keyed by stored tensor name.
using Parts = std::map<std::string, Bytes>;

Result<Parts> official_parts(const LogicalTensor& t, const ModelConfig& c, uint64_t seed) {
    Parts p;
    if (t.kind == ParamKind::kTable) {
        p[t.name] = raw_bytes(random_tid2eid(t, c.n_routed_experts, seed));
        return p;
    }
    const std::vector<float> v = random_logical_values(t, seed);
    const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1, cols = t.shape.back();
    switch (t.kind) {
        case ParamKind::kBF16: p[t.name] = bf16_bytes(v); break;
        case ParamKind::kF32: p[t.name] = raw_bytes(v); break;
        case ParamKind::kLinear: {
            DSV4_ASSIGN_OR_RETURN(Fp8BlockTensor q, fp8_block_encode(v, rows, cols));
            p[t.name] = std::move(q.data);
            p[scale_name(t.name)] = std::move(q.scales);
            break;
        }
        case ParamKind::kExpert:
            switch (c.expert_format) {
                case ExpertFormat::kMXFP4: {
                    DSV4_ASSIGN_OR_RETURN(Mxfp4Tensor q, mxfp4_encode(v, rows, cols));
                    p[t.name] = std::move(q.packed);
                    p[scale_name(t.name)] = std::move(q.scales);
                    break;
                }
                case ExpertFormat::kNVFP4: {
                    DSV4_ASSIGN_OR_RETURN(Nvfp4Tensor q, nvfp4_encode(v, rows, cols));
                    p[t.name] = std::move(q.packed);
                    p[scale_name(t.name)] = std::move(q.scales);
                    p[global_scale_name(t.name)] = raw_bytes(std::vector<float>{q.global_scale});
                    break;
                }
                case ExpertFormat::kFP8: {  // the -Base checkpoints: F32 block scales (powers of two here)
                    DSV4_ASSIGN_OR_RETURN(Fp8BlockTensor q, fp8_block_encode(v, rows, cols));
                    p[t.name] = std::move(q.data);
                    p[scale_name(t.name)] = raw_bytes(ue8m0_as_f32(q.scales));
                    break;
                }
            }
            break;
        case ParamKind::kTable: break;
    }
    return p;
}

// The values a quantised linear carries after its encoding (what the transformers layout stores as BF16).
Result<std::vector<float>> dequantised_values(const LogicalTensor& t, const ModelConfig& c, uint64_t seed) {
    std::vector<float> v = random_logical_values(t, seed);
    const int64_t rows = t.shape[0], cols = t.shape[1];
    std::vector<float> out(v.size());
    if (t.kind == ParamKind::kLinear || (t.kind == ParamKind::kExpert && c.expert_format == ExpertFormat::kFP8)) {
        DSV4_ASSIGN_OR_RETURN(Fp8BlockTensor q, fp8_block_encode(v, rows, cols));
        DSV4_RETURN_IF_ERROR(fp8_block_decode(q.data, q.scales, rows, cols, out));
    } else if (c.expert_format == ExpertFormat::kMXFP4) {
        DSV4_ASSIGN_OR_RETURN(Mxfp4Tensor q, mxfp4_encode(v, rows, cols));
        DSV4_RETURN_IF_ERROR(mxfp4_decode(q.packed, q.scales, rows, cols, out));
    } else {
        DSV4_ASSIGN_OR_RETURN(Nvfp4Tensor q, nvfp4_encode(v, rows, cols));
        DSV4_RETURN_IF_ERROR(nvfp4_decode(q.packed, q.scales, q.global_scale, rows, cols, out));
    }
    return out;
}

// Produces the bytes of every stored tensor of the schema, generating each logical tensor once.
class TensorSource {
public:
    TensorSource(const ModelConfig& c, Layout layout, uint64_t seed) : c_(c), layout_(layout), seed_(seed) {
        logical_ = logical_tensors(c, /*include_mtp=*/layout == Layout::kOfficial);
        for (size_t i = 0; i < logical_.size(); ++i) {
            const LogicalTensor& t = logical_[i];
            by_official_[t.name] = i;
            if (layout == Layout::kOfficial) {
                owner_[t.name] = i;
                if (t.kind == ParamKind::kLinear || t.kind == ParamKind::kExpert) owner_[scale_name(t.name)] = i;
                if (t.kind == ParamKind::kExpert && c.expert_format == ExpertFormat::kNVFP4)
                    owner_[global_scale_name(t.name)] = i;
            } else if (t.kind != ParamKind::kExpert) {
                owner_[transformers_name(t.name)] = i;
            }
        }
        if (layout == Layout::kTransformers) {
            for (int l = 0; l < c.num_layers; ++l) {
                auto [gate_up, down] = merged_expert_names(l);
                merged_layer_[gate_up] = l;
                merged_layer_[down] = l;
            }
        }
    }

    Result<Bytes> bytes_for(const TensorSpec& spec) {
        if (pending_.find(spec.name) == pending_.end()) DSV4_RETURN_IF_ERROR(generate(spec.name));
        auto it = pending_.find(spec.name);
        if (it == pending_.end()) return internal_error("make-model: no data produced for tensor '" + spec.name + "'");
        Bytes b = std::move(it->second);
        pending_.erase(it);
        if (b.size() != spec.nbytes()) {
            return internal_error("make-model: tensor '" + spec.name + "' encodes to " + std::to_string(b.size()) +
                                  " bytes but the schema says " + std::to_string(spec.nbytes()));
        }
        return b;
    }

private:
    Status generate(const std::string& stored) {
        if (auto m = merged_layer_.find(stored); m != merged_layer_.end()) return generate_merged(m->second);
        auto o = owner_.find(stored);
        if (o == owner_.end()) return internal_error("make-model: schema tensor '" + stored + "' has no source");
        const LogicalTensor& t = logical_[o->second];
        if (layout_ == Layout::kOfficial) {
            DSV4_ASSIGN_OR_RETURN(Parts parts, official_parts(t, c_, seed_));
            for (auto& [name, bytes] : parts) pending_[name] = std::move(bytes);
            return Status::ok();
        }
        if (t.kind == ParamKind::kTable) {
            pending_[stored] = raw_bytes(random_tid2eid(t, c_.n_routed_experts, seed_));
        } else if (t.kind == ParamKind::kF32) {
            pending_[stored] = raw_bytes(random_logical_values(t, seed_));
        } else if (t.kind == ParamKind::kLinear) {
            DSV4_ASSIGN_OR_RETURN(std::vector<float> v, dequantised_values(t, c_, seed_));
            pending_[stored] = bf16_bytes(v);  // e4m3 x 2^k is exact in BF16
        } else {
            pending_[stored] = bf16_bytes(random_logical_values(t, seed_));
        }
        return Status::ok();
    }

    // gate_up_proj [E, 2I, D] (w1 rows, then w3 rows) and down_proj [E, D, I] of main layer `layer`.
    Status generate_merged(int layer) {
        const int64_t E = c_.n_routed_experts, I = c_.moe_inter_dim, D = c_.hidden_size;
        std::vector<float> gate_up(static_cast<size_t>(E * 2 * I * D)), down(static_cast<size_t>(E * D * I));
        for (int64_t e = 0; e < E; ++e) {
            const std::string p = "layers." + std::to_string(layer) + ".ffn.experts." + std::to_string(e) + ".";
            for (const char* w : {"w1", "w3", "w2"}) {
                auto it = by_official_.find(p + w + ".weight");
                if (it == by_official_.end()) return internal_error("make-model: no logical tensor " + p + w);
                DSV4_ASSIGN_OR_RETURN(std::vector<float> v, dequantised_values(logical_[it->second], c_, seed_));
                float* dst = w[1] == '2' ? down.data() + e * D * I
                                         : gate_up.data() + (e * 2 * I + (w[1] == '3' ? I : 0)) * D;
                std::copy(v.begin(), v.end(), dst);
            }
        }
        auto [gate_up_name, down_name] = merged_expert_names(layer);
        pending_[gate_up_name] = bf16_bytes(gate_up);
        pending_[down_name] = bf16_bytes(down);
        return Status::ok();
    }

    const ModelConfig& c_;
    Layout layout_;
    uint64_t seed_;
    std::vector<LogicalTensor> logical_;
    std::map<std::string, size_t> by_official_, owner_;
    std::map<std::string, int> merged_layer_;
    std::map<std::string, Bytes> pending_;
};

std::string shard_file_name(size_t index, size_t count) {
    if (count == 1) return "model.safetensors";
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", index + 1, count);
    return buf;
}

// Removes checkpoint files a previous run left in `dir` (a stale shard would join the new checkpoint).
Status remove_old_checkpoint_files(const std::filesystem::path& dir) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        const bool ours = name == "model.safetensors.index.json" || name == "config.json" ||
                          (name.rfind("model", 0) == 0 && ends_with(name, ".safetensors"));
        if (ours && !std::filesystem::remove(entry.path(), ec)) {
            return io_error(entry.path().string() + ": cannot remove the old file: " + ec.message());
        }
    }
    if (ec) return io_error(dir.string() + ": cannot list the folder: " + ec.message());
    return Status::ok();
}

Status write_text_file(const std::filesystem::path& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) return io_error(path.string() + ": cannot write the file");
    return Status::ok();
}

}  // namespace

Result<ModelConfig> make_model_config(const MakeModelOptions& o) {
    DSV4_ASSIGN_OR_RETURN(ModelConfig c, preset_config(o.preset));
    if (o.layers) {
        if (*o.layers < 1 || *o.layers > c.num_layers) {
            return invalid_argument("--layers " + std::to_string(*o.layers) + " is outside [1, " +
                                    std::to_string(c.num_layers) + "] for preset '" + o.preset + "'");
        }
        const int mtp_ratio = c.compress_ratios.back();
        c.compress_ratios.resize(static_cast<size_t>(*o.layers));
        c.compress_ratios.push_back(mtp_ratio);
        c.num_layers = *o.layers;
        c.num_hash_layers = std::min(c.num_hash_layers, c.num_layers);
    }
    if (o.experts) {
        if (*o.experts < 1) return invalid_argument("--experts must be at least 1, got " + std::to_string(*o.experts));
        c.n_routed_experts = *o.experts;
        c.n_experts_per_token = std::min(c.n_experts_per_token, c.n_routed_experts);
    }
    if (o.expert_format) c.expert_format = *o.expert_format;
    if (o.vocab) {
        if (*o.vocab < 1)
            return invalid_argument("vocabulary size must be at least 1, got " + std::to_string(*o.vocab));
        c.vocab_size = *o.vocab;
    }
    DSV4_RETURN_IF_ERROR(validate_config(c));
    return c;
}

std::vector<float> random_logical_values(const LogicalTensor& t, uint64_t seed) {
    Rng rng(seed, t.name);
    const std::string& n = t.name;
    double mean = 0, stddev;
    if (ends_with(n, "norm.weight")) {
        mean = 1.0;  // RMSNorm gains sit around 1
        stddev = 0.05;
    } else if (contains(n, "hc_") || ends_with(n, ".ape") || ends_with(n, "gate.bias")) {
        stddev = 1e-2;  // mHC mixes, compressor position biases, router bias: small
    } else if (ends_with(n, "attn_sink")) {
        stddev = 1.0;
    } else {
        stddev = 1.0 / std::sqrt(static_cast<double>(t.shape.back()));  // a linear [out, in]: N(0, 1/sqrt(in))
    }
    std::vector<float> v(static_cast<size_t>(numel(t.shape)));
    for (float& x : v) x = static_cast<float>(mean + stddev * rng.normal());
    return v;
}

std::vector<int64_t> random_tid2eid(const LogicalTensor& t, int64_t n_experts, uint64_t seed) {
    Rng rng(seed, t.name);
    const int64_t rows = t.shape[0], k = t.shape[1];
    std::vector<int64_t> ids(static_cast<size_t>(rows * k));
    std::vector<int64_t> perm(static_cast<size_t>(n_experts));
    for (int64_t r = 0; r < rows; ++r) {
        std::iota(perm.begin(), perm.end(), int64_t{0});
        for (int64_t j = 0; j < k && j < n_experts; ++j) {  // partial Fisher-Yates: k distinct ids
            const int64_t pick = j + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n_experts - j)));
            std::swap(perm[j], perm[pick]);
            ids[r * k + j] = perm[j];
        }
    }
    return ids;
}

Result<MakeModelResult> make_model(const MakeModelOptions& o, const MakeModelProgressFn& progress) {
    if (o.out.empty()) return invalid_argument("make-model needs an output folder (--out DIR)");
    if (o.shard_size == 0) return invalid_argument("--shard-size must be positive");
    MakeModelResult result;
    DSV4_ASSIGN_OR_RETURN(result.config, make_model_config(o));
    const ModelConfig& c = result.config;

    std::error_code ec;
    std::filesystem::create_directories(o.out, ec);
    if (ec) return io_error(o.out.string() + ": cannot create the folder: " + ec.message());
    DSV4_RETURN_IF_ERROR(remove_old_checkpoint_files(o.out));

    const std::vector<TensorSpec> specs = checkpoint_schema(c, o.layout);
    result.totals = schema_totals(specs);

    // Greedy sharding in schema order: a shard closes when the next tensor would push it past shard_size.
    std::vector<std::vector<size_t>> shards(1);
    uint64_t shard_bytes = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        if (!shards.back().empty() && shard_bytes + specs[i].nbytes() > o.shard_size) {
            shards.emplace_back();
            shard_bytes = 0;
        }
        shards.back().push_back(i);
        shard_bytes += specs[i].nbytes();
    }

    TensorSource source(c, o.layout, o.seed);
    std::map<std::string, std::string> weight_map;
    MakeModelProgress prog;
    prog.shards = static_cast<int>(shards.size());
    prog.bytes_total = result.totals.bytes;
    for (size_t s = 0; s < shards.size(); ++s) {
        const std::string file = shard_file_name(s, shards.size());
        prog.shard = static_cast<int>(s + 1);
        prog.file = file;
        std::vector<Bytes> buffers;
        buffers.reserve(shards[s].size());
        std::vector<io::TensorToWrite> tensors;
        for (size_t i : shards[s]) {
            const TensorSpec& spec = specs[i];
            io::TensorToWrite w{spec.name, spec.dtype, spec.shape, {}};
            if (!o.header_only) {
                DSV4_ASSIGN_OR_RETURN(Bytes b, source.bytes_for(spec));
                buffers.push_back(std::move(b));
                w.data = buffers.back();
            }
            tensors.push_back(std::move(w));
            weight_map[spec.name] = file;
            prog.bytes_done += spec.nbytes();
            if (progress && !o.header_only) progress(prog);
        }
        DSV4_RETURN_IF_ERROR(io::write_safetensors(o.out / file, tensors, {{"format", "pt"}}, o.header_only));
        result.files.push_back(file);
        if (progress) progress(prog);
    }
    if (shards.size() > 1) {
        DSV4_RETURN_IF_ERROR(io::write_index(o.out, weight_map, result.totals.bytes));
        result.files.push_back("model.safetensors.index.json");
    }
    DSV4_RETURN_IF_ERROR(write_text_file(o.out / "config.json", config_to_json(c, o.layout == Layout::kTransformers)));
    result.files.push_back("config.json");
    return result;
}

}  // namespace dsv4::model
