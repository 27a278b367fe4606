// A shared library opened with dlopen, and its symbols, for the GPU
// libraries the engine loads at run time (cuda_driver.h, nccl.h).
#pragma once

#include <string>
#include <vector>

namespace ring::gpu {

class SharedLibrary {
 public:
  // Opens `path` (a file path or a soname the dynamic loader searches for).
  // no_load: only find a copy already loaded in the process (RTLD_NOLOAD).
  // On failure ok() is false and error() holds dlerror()'s text.
  SharedLibrary(const std::string& path, bool no_load = false);
  SharedLibrary(SharedLibrary&& o) noexcept;
  SharedLibrary& operator=(SharedLibrary&& o) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  ~SharedLibrary();  // keeps the library loaded when release() was called

  bool ok() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }
  // The file the loader actually opened (dlinfo), or the path given.
  std::string file() const;

  // Sets *fn to the symbol `name`; records the name as missing otherwise.
  template <class Fn>
  void resolve(Fn*& fn, const char* name) {
    fn = reinterpret_cast<Fn*>(symbol(name));
  }
  // Sets *fn to the symbol `name`, or null: a function newer versions have.
  template <class Fn>
  void resolve_optional(Fn*& fn, const char* name) {
    fn = reinterpret_cast<Fn*>(optional_symbol(name));
  }
  // Names resolve() did not find, in the order asked; and as "a, b".
  const std::vector<std::string>& missing() const { return missing_; }
  std::string missing_text() const;
  // The library stays loaded for the rest of the process (its functions
  // are kept in process-wide tables).
  void release() { released_ = true; }

 private:
  void* symbol(const char* name);
  void* optional_symbol(const char* name);

  void* handle_ = nullptr;
  bool released_ = false;
  std::string path_;
  std::string error_;
  std::vector<std::string> missing_;
};

}  // namespace ring::gpu
