#include "serve/repository.h"

#include <algorithm>
#include <filesystem>

namespace fs = std::filesystem;

namespace braid::serve {

bool valid_model_name(const std::string& name) {
    if (name.empty() || name.size() > 128 || name[0] == '.') return false;
    for (char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
            return false;
    return true;
}

Repository::Repository(std::string dir, Metrics& metrics)
    : m_dir(std::move(dir)), m_metrics(metrics) {}

bool Repository::exists(const std::string& name) const {
    if (!valid_model_name(name)) return false;
    std::error_code ec;
    fs::path folder = fs::path(m_dir) / name;
    return fs::is_regular_file(folder / "model.braid", ec) ||
           fs::is_regular_file(folder / "model.onnx", ec);
}

std::shared_ptr<ModelRunner> Repository::open(const std::string& name) const {
    fs::path folder = fs::path(m_dir) / name;
    std::error_code ec;
    bool braid = fs::is_regular_file(folder / "model.braid", ec);
    bool onnx = fs::is_regular_file(folder / "model.onnx", ec);
    if (braid && onnx)
        throw std::runtime_error("model \"" + name + "\": " + folder.string() +
                                 " holds both model.braid and model.onnx; keep one");
    if (!braid && !onnx)
        throw std::runtime_error("model \"" + name + "\": " + folder.string() +
                                 " holds neither model.braid nor model.onnx");
    ModelConfig config = read_model_config((folder / "config.json").string());
    embed::ModelOptions options;
    options.memory_budget = config.memory_budget;
    fs::path file = folder / (braid ? "model.braid" : "model.onnx");
    std::shared_ptr<embed::Model> model;
    try {
        model = embed::Model::load(file.string(), options);
    } catch (const embed::Error& e) {
        throw std::runtime_error("model \"" + name + "\": " + embed::code_name(e.code()) + ": " +
                                 e.what());
    }
    return std::make_shared<ModelRunner>(name, braid ? "braid" : "onnx", std::move(model), config,
                                         m_metrics.model(name));
}

void Repository::load_all() {
    std::vector<std::string> names;
    std::error_code ec;
    fs::directory_iterator it(m_dir, ec);
    if (ec) throw std::runtime_error("model repository " + m_dir + ": " + ec.message());
    for (auto& entry : it)
        if (entry.is_directory(ec)) {
            std::string name = entry.path().filename().string();
            if (name[0] == '.') continue;
            if (!valid_model_name(name))
                throw std::runtime_error("model repository " + m_dir + ": folder \"" + name +
                                         "\" is not a valid model name (letters, digits, _ - .)");
            names.push_back(name);
        }
    std::sort(names.begin(), names.end());
    for (auto& name : names) {
        auto runner = open(name);
        std::unique_lock lock(m_mutex);
        m_models.emplace_back(name, std::move(runner));
    }
}

std::shared_ptr<ModelRunner> Repository::get(const std::string& name) const {
    std::shared_lock lock(m_mutex);
    for (auto& [n, r] : m_models)
        if (n == name) return r;
    return nullptr;
}

void Repository::load(const std::string& name) {
    if (!valid_model_name(name))
        throw RequestError(400, "\"" + name.substr(0, 64) +
                                    "\" is not a valid model name (letters, digits, _ - .)");
    std::lock_guard load_lock(m_load_mutex);
    std::error_code ec;
    if (!fs::is_directory(fs::path(m_dir) / name, ec))
        throw RequestError(404, "model \"" + name + "\": no folder " + name +
                                    " in the model repository");
    std::shared_ptr<ModelRunner> runner;
    try {
        runner = open(name);
    } catch (const std::exception& e) {
        throw RequestError(400, e.what());
    }
    std::shared_ptr<ModelRunner> old;
    {
        std::unique_lock lock(m_mutex);
        auto it = std::find_if(m_models.begin(), m_models.end(),
                               [&](auto& m) { return m.first == name; });
        if (it != m_models.end()) {
            old = std::move(it->second);
            it->second = std::move(runner);
        } else {
            m_models.emplace_back(name, std::move(runner));
        }
    }
    // `old` goes here, or with the last request that holds it.
}

bool Repository::unload(const std::string& name) {
    std::lock_guard load_lock(m_load_mutex);
    std::shared_ptr<ModelRunner> old;
    std::unique_lock lock(m_mutex);
    auto it =
        std::find_if(m_models.begin(), m_models.end(), [&](auto& m) { return m.first == name; });
    if (it == m_models.end()) return false;
    old = std::move(it->second);
    m_models.erase(it);
    lock.unlock();
    return true;
}

std::vector<Repository::Entry> Repository::index() const {
    std::vector<Entry> out;
    std::error_code ec;
    for (auto& entry : fs::directory_iterator(m_dir, ec)) {
        std::string name = entry.path().filename().string();
        if (exists(name)) out.push_back({name, get(name) != nullptr});
    }
    std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.name < b.name; });
    return out;
}

std::vector<std::string> Repository::loaded() const {
    std::shared_lock lock(m_mutex);
    std::vector<std::string> out;
    for (auto& [n, r] : m_models) out.push_back(n);
    return out;
}

void Repository::clear() {
    std::vector<std::shared_ptr<ModelRunner>> old;
    {
        std::unique_lock lock(m_mutex);
        for (auto& [n, r] : m_models) old.push_back(std::move(r));
        m_models.clear();
    }
}

} // namespace braid::serve
