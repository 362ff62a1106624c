// Checkpoint: a folder of safetensors shards, with or without model.safetensors.index.json.
//
// With an index, the index and the shards must agree exactly: every index entry names a plain file in the folder
// that holds that tensor, every tensor of every referenced shard is listed in the index under that shard, and no
// tensor appears in two shards. Without an index, model.safetensors alone, else every *.safetensors in the folder.
#include <algorithm>
#include <set>

#include "io/safetensors.h"
#include "io/safetensors_internal.h"

namespace dsv4::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";

// The weight map of an index: tensor name -> shard file name, each name already checked to be a plain file name.
Result<std::map<std::string, std::string>> read_weight_map(const fs::path& index_path) {
    const std::string label = index_path.string();
    DSV4_ASSIGN_OR_RETURN(std::string text, detail::read_small_file(index_path, kMaxHeaderBytes));
    DSV4_ASSIGN_OR_RETURN(json doc, detail::parse_json_strict(text, label));
    if (!doc.is_object()) {
        return corrupt(label + ": must be a JSON object {\"metadata\": {...}, \"weight_map\": {...}}, got " +
                       doc.type_name());
    }
    if (doc.contains("metadata")) {
        const json& meta = doc["metadata"];
        if (!meta.is_object()) return corrupt(label + ": \"metadata\" must be an object, got " + meta.type_name());
        if (meta.contains("total_size") && !meta["total_size"].is_number_unsigned()) {
            return corrupt(label + ": \"metadata\".\"total_size\" must be a non-negative integer, got " +
                           detail::printable(meta["total_size"].dump(), 60));
        }
    }
    if (!doc.contains("weight_map")) return corrupt(label + ": no \"weight_map\" object");
    const json& wm = doc["weight_map"];
    if (!wm.is_object()) return corrupt(label + ": \"weight_map\" must be an object, got " + wm.type_name());
    if (wm.empty()) return corrupt(label + ": \"weight_map\" is empty; the checkpoint holds no tensors");
    std::map<std::string, std::string> out;
    for (const auto& item : wm.items()) {
        const std::string where = label + ": tensor '" + detail::printable(item.key()) + "': ";
        if (!item.value().is_string()) {
            return corrupt(where + "shard must be a file name string, got " + item.value().type_name());
        }
        const std::string& shard = item.value().get_ref<const std::string&>();
        if (std::string why = detail::plain_file_name_problem(shard); !why.empty()) {
            return corrupt(where + "shard '" + detail::printable(shard) + "' is not a plain file name in the " +
                           "checkpoint folder (" + why + "); refusing to open files elsewhere");
        }
        out.emplace(item.key(), shard);
    }
    return out;
}

// Every *.safetensors regular file (or link to one) in `dir`, sorted; hidden files are skipped.
Result<std::vector<fs::path>> list_safetensors(const fs::path& dir) {
    std::error_code ec;
    std::vector<fs::path> out;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const fs::path& p = it->path();
        const std::string name = p.filename().string();
        if (p.extension() != ".safetensors" || name.front() == '.') continue;
        std::error_code type_ec;
        if (fs::is_regular_file(p, type_ec)) out.push_back(p);
    }
    if (ec) return io_error(dir.string() + ": cannot list the folder: " + ec.message());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

Result<std::unique_ptr<Checkpoint>> Checkpoint::open(const fs::path& dir) {
    std::error_code ec;
    const fs::file_status st = fs::status(dir, ec);
    if (!fs::exists(st)) return not_found(dir.string() + ": no such checkpoint folder or file");

    auto ckpt = std::make_unique<Checkpoint>();
    std::vector<fs::path> shard_paths;
    std::map<std::string, std::string> weight_map;
    const fs::path index_path = dir / kIndexName;
    bool indexed = false;
    ckpt->dir_ = dir;
    if (fs::is_regular_file(st)) {  // a single .safetensors file given directly
        ckpt->dir_ = dir.parent_path();
        shard_paths.push_back(dir);
    } else if (!fs::is_directory(st)) {
        return io_error(dir.string() + ": neither a folder nor a regular file");
    } else if (fs::exists(index_path, ec)) {
        indexed = true;
        DSV4_ASSIGN_OR_RETURN(weight_map, read_weight_map(index_path));
        // Open each shard once, in name order; report a missing one through the first tensor mapped to it.
        std::map<std::string, std::string> first_tensor_of_shard;
        for (const auto& [tensor, shard] : weight_map) first_tensor_of_shard.emplace(shard, tensor);
        for (const auto& [shard, tensor] : first_tensor_of_shard) {
            const fs::path p = dir / shard;
            if (!fs::exists(p, ec)) {
                return not_found(index_path.string() + ": tensor '" + detail::printable(tensor) + "' is mapped to shard '" +
                                 detail::printable(shard) + "', which does not exist (" + p.string() + ")");
            }
            shard_paths.push_back(p);
        }
    } else if (fs::exists(dir / "model.safetensors", ec)) {
        shard_paths.push_back(dir / "model.safetensors");
    } else {
        DSV4_ASSIGN_OR_RETURN(shard_paths, list_safetensors(dir));
        if (shard_paths.empty()) {
            return not_found(dir.string() + ": no " + kIndexName + ", model.safetensors or *.safetensors file");
        }
    }

    for (const fs::path& p : shard_paths) {
        DSV4_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(p));
        const std::string shard = p.filename().string();
        for (const TensorEntry& e : file->header().tensors) {
            const std::string where = p.string() + ": tensor '" + detail::printable(e.name) + "'";
            auto [it, inserted] = ckpt->tensors_.emplace(e.name, Tensor{&e, file.get()});
            if (!inserted) {
                return corrupt(where + " is also in " + it->second.file->path().string() +
                               "; a tensor may appear in only one shard");
            }
            if (!indexed) continue;
            auto mapped = weight_map.find(e.name);
            if (mapped == weight_map.end()) {
                return corrupt(where + " is not listed in " + index_path.string() +
                               "; the index and the shards disagree");
            }
            if (mapped->second != shard) {
                return corrupt(where + " is in this shard but " + index_path.string() + " maps it to '" +
                               detail::printable(mapped->second) + "'");
            }
        }
        ckpt->files_.push_back(std::move(file));
    }
    for (const auto& [tensor, shard] : weight_map) {
        if (!ckpt->tensors_.count(tensor)) {
            return corrupt(index_path.string() + ": tensor '" + detail::printable(tensor) + "' is mapped to shard '" +
                           detail::printable(shard) + "', which does not hold it (" + (dir / shard).string() + ")");
        }
    }
    ckpt->names_.reserve(ckpt->tensors_.size());
    for (const auto& item : ckpt->tensors_) ckpt->names_.push_back(item.first);
    return ckpt;
}

const Checkpoint::Tensor* Checkpoint::find(std::string_view name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

uint64_t Checkpoint::total_bytes() const {
    uint64_t total = 0;
    for (const auto& item : tensors_) total += item.second.entry->nbytes();
    return total;
}

}  // namespace dsv4::io
