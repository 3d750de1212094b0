// braid-serve's model repository: a directory with one folder per model,
//
//     DIR/NAME/model.braid   (or model.onnx)
//     DIR/NAME/config.json   (optional: max_batch_size, max_queue_delay_us, instances,
//                             memory_budget)
//
// Models load at start (load_all) and, when model control is enabled, on request (load,
// unload). Thread-safe: lookups take a shared lock; a model being unloaded finishes the
// requests that already hold it.
#pragma once

#include "serve/metrics.h"
#include "serve/model_runner.h"

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

namespace braid::serve {

//! The models of a repository directory. Thread-safe.
class Repository {
public:
    Repository(std::string dir, Metrics& metrics);

    //! Loads every model folder; throws std::runtime_error naming the folder that failed.
    void load_all();
    //! The model named `name` when loaded, else nullptr.
    std::shared_ptr<ModelRunner> get(const std::string& name) const;
    //! (Re)loads `name` from its folder. Throws RequestError: 400 for a bad name, 404 for no
    //! such folder, 400 for a model or config that does not load.
    void load(const std::string& name);
    //! Unloads `name`; returns false when it was not loaded.
    bool unload(const std::string& name);
    //! Whether DIR/NAME holds a model file.
    bool exists(const std::string& name) const;

    struct Entry {
        std::string name;
        bool ready;
    };
    //! Every model folder, loaded or not, by name.
    std::vector<Entry> index() const;
    //! Names of the loaded models.
    std::vector<std::string> loaded() const;
    //! Unloads every model (waits for each one's queued requests).
    void clear();

private:
    std::shared_ptr<ModelRunner> open(const std::string& name) const;

    std::string m_dir;
    Metrics& m_metrics;
    mutable std::shared_mutex m_mutex;
    std::vector<std::pair<std::string, std::shared_ptr<ModelRunner>>> m_models;
    std::mutex m_load_mutex; //!< one load or unload at a time
};

//! Whether `name` may name a model folder: letters, digits, '_', '-', '.', not starting with '.'.
bool valid_model_name(const std::string& name);

} // namespace braid::serve
