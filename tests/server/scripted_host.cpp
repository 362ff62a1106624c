// A dsv4 server over a scripted model, for tests that need replies a random checkpoint cannot produce (DSML tool
// calls, closed reasoning) or slow, predictable timing (disconnects, full queues, loading). Everything but the
// model is the real server: tokenizer, scheduler, sampler, detokeniser, reply parser, HTTP.
//
// The script is a JSON list of {"when": "text", "reply": "text"}: the first entry whose "when" occurs in the prompt
// (the tokens before the last <｜Assistant｜>) gives the reply; the model then puts all probability on the reply's
// tokens, then on the end-of-sentence token.
//
//   dsv4_server_scripted_host --tokenizer tokenizer.json --script script.json [--port 0] [-np N] [--queue N]
//       [--api-key KEY] [--delay-ms N] [--load-delay-ms N] [-c N] [--timeout S]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv4/chat.h"
#include "server/server.h"

namespace {

using namespace dsv4;

struct ScriptEntry {
    std::string when;
    std::vector<int32_t> reply;  // reply ids + EOS
};

class ScriptedRunner : public server::SequenceRunner {
public:
    ScriptedRunner(const Tokenizer& tok, const std::vector<ScriptEntry>& script, int delay_ms)
        : tok_(tok), script_(script), delay_ms_(delay_ms) {
        assistant_ = *tok.token_to_id(chat::kAssistantToken);
        eos_ = *tok.token_to_id(chat::kEosToken);
    }
    Status feed(std::span<const int32_t> tokens, Logits* out) override {
        if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
        history_.insert(history_.end(), tokens.begin(), tokens.end());
        const int64_t vocab = tok_.vocab_size();
        out->rows = int64_t(tokens.size());
        out->vocab = vocab;
        out->values.assign(size_t(out->rows * vocab), 0.0f);
        out->values[size_t((out->rows - 1) * vocab + next_token())] = 60.0f;
        return Status::ok();
    }
    void reset() override { history_.clear(); }

private:
    int32_t next_token() const {
        size_t a = history_.size();
        while (a > 0 && history_[a - 1] != assistant_) --a;
        if (a == 0) return eos_;
        // The prompt ends "<｜Assistant｜>" + "<think>" or "</think>": generated tokens start after that.
        const size_t start = a + 1;
        if (history_.size() < start) return eos_;
        Result<std::string> prompt = tok_.decode(std::span<const int32_t>(history_.data(), a - 1));
        for (const auto& e : script_) {
            if (!prompt.is_ok() || prompt->find(e.when) == std::string::npos) continue;
            const size_t m = history_.size() - start;
            return m < e.reply.size() ? e.reply[m] : eos_;
        }
        return eos_;
    }

    const Tokenizer& tok_;
    const std::vector<ScriptEntry>& script_;
    int delay_ms_;
    int32_t assistant_ = -1, eos_ = -1;
    std::vector<int32_t> history_;
};

class ScriptedBackend : public server::ModelBackend {
public:
    ScriptedBackend(const Tokenizer& tok, std::vector<ScriptEntry> script, int delay_ms)
        : tok_(tok), script_(std::move(script)), delay_ms_(delay_ms) {}
    int32_t vocab_size() const override { return tok_.vocab_size(); }
    int64_t max_context() const override { return 1 << 20; }
    Result<std::unique_ptr<server::SequenceRunner>> create_runner(int64_t) override {
        return std::unique_ptr<server::SequenceRunner>(new ScriptedRunner(tok_, script_, delay_ms_));
    }

private:
    const Tokenizer& tok_;
    std::vector<ScriptEntry> script_;
    int delay_ms_;
};

int fail(const std::string& m) {
    std::fprintf(stderr, "scripted_host: %s\n", m.c_str());
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    server::ServerOptions o;
    o.port = 0;
    o.context = 4096;
    o.chunk = 64;
    o.alias = "scripted";
    o.keepalive_s = 0.2;
    std::string tokenizer_path, script_path;
    int delay_ms = 0, load_delay_ms = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) return fail("flag " + a + " needs a value");
        const std::string v = argv[++i];
        if (a == "--tokenizer") tokenizer_path = v;
        else if (a == "--script") script_path = v;
        else if (a == "--port") o.port = std::atoi(v.c_str());
        else if (a == "-np") o.slots = std::atoi(v.c_str());
        else if (a == "--queue") o.max_queue = std::atoi(v.c_str());
        else if (a == "--api-key") o.api_key = v;
        else if (a == "--delay-ms") delay_ms = std::atoi(v.c_str());
        else if (a == "--load-delay-ms") load_delay_ms = std::atoi(v.c_str());
        else if (a == "-c") o.context = std::atoll(v.c_str());
        else if (a == "--timeout") o.timeout_s = std::atof(v.c_str());
        else if (a == "--max-body") o.max_body = size_t(std::atoll(v.c_str()));
        else return fail("unknown flag " + a);
    }
    std::ifstream in(script_path);
    if (!in) return fail("cannot open the script " + script_path);
    std::stringstream ss;
    ss << in.rdbuf();
    const nlohmann::json script = nlohmann::json::parse(ss.str(), nullptr, false);
    if (!script.is_array()) return fail(script_path + ": expected a JSON list");

    auto loader = [=]() -> Result<server::LoadedModel> {
        std::this_thread::sleep_for(std::chrono::milliseconds(load_delay_ms));
        server::LoadedModel m;
        DSV4_ASSIGN_OR_RETURN(m.tokenizer, Tokenizer::from_file(tokenizer_path));
        std::vector<ScriptEntry> entries;
        for (const auto& e : script) {
            ScriptEntry s;
            s.when = e.value("when", "");
            s.reply = m.tokenizer->encode(e.value("reply", ""));
            s.reply.push_back(*m.tokenizer->token_to_id(chat::kEosToken));
            entries.push_back(std::move(s));
        }
        m.backend = std::make_unique<ScriptedBackend>(*m.tokenizer, std::move(entries), delay_ms);
        return m;
    };
    auto srv = server::Server::start(o, loader);
    if (!srv.is_ok()) return fail(srv.status().to_string());
    std::fprintf(stderr, "dsv4 serve: listening on http://%s:%d\n", o.host.c_str(), (*srv)->port());
    Status st = (*srv)->wait();  // runs until killed (the test sends SIGTERM)
    return st ? 0 : fail(st.to_string());
}
