// dsv4/checkpoint_tools.h: the public entry points, translated to and from the model module's types
// (model/inspect.h, model/make_model.h).
#include "dsv4/checkpoint_tools.h"

#include "model/inspect.h"
#include "model/make_model.h"

namespace dsv4 {

Result<std::string> describe_checkpoint(const std::filesystem::path& dir, bool json) {
    DSV4_ASSIGN_OR_RETURN(model::InspectReport report, model::inspect_checkpoint(dir));
    return json ? model::format_report_json(report) : model::format_report_text(report);
}

Result<RandomCheckpointSummary> make_random_checkpoint(
    const RandomCheckpointOptions& options, const std::function<void(const CheckpointWriteProgress&)>& progress) {
    model::MakeModelOptions o;
    o.preset = options.preset;
    if (options.layers != 0) o.layers = options.layers;
    if (options.experts != 0) o.experts = options.experts;
    if (options.layout == "official") o.layout = model::Layout::kOfficial;
    else if (options.layout == "transformers") o.layout = model::Layout::kTransformers;
    else return invalid_argument("unknown checkpoint layout '" + options.layout + "': use official or transformers");
    if (options.expert_format == "mxfp4") o.expert_format = model::ExpertFormat::kMXFP4;
    else if (options.expert_format == "nvfp4") o.expert_format = model::ExpertFormat::kNVFP4;
    else if (options.expert_format == "fp8") o.expert_format = model::ExpertFormat::kFP8;
    else if (!options.expert_format.empty())
        return invalid_argument("unknown expert format '" + options.expert_format + "': use mxfp4, nvfp4 or fp8");
    o.seed = options.seed;
    o.header_only = options.header_only;
    o.shard_size = options.shard_size;
    o.out = options.out;

    model::MakeModelProgressFn model_progress;
    if (progress) {
        model_progress = [&progress](const model::MakeModelProgress& p) {
            progress(CheckpointWriteProgress{p.shard, p.shards, p.bytes_done, p.bytes_total, p.file});
        };
    }
    DSV4_ASSIGN_OR_RETURN(model::MakeModelResult made, model::make_model(o, model_progress));

    RandomCheckpointSummary s;
    s.layers = made.config.num_layers;
    s.mtp_layers = o.layout == model::Layout::kOfficial ? made.config.num_mtp_layers : 0;
    s.experts = made.config.n_routed_experts;
    s.expert_format = model::expert_format_name(made.config.expert_format);
    s.layout = model::layout_name(o.layout);
    s.files = std::move(made.files);
    s.tensors = made.totals.tensors;
    s.params = made.totals.logical_params;
    s.bytes = made.totals.bytes;
    return s;
}

}  // namespace dsv4
