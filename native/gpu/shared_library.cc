#include "gpu/shared_library.h"

#include <dlfcn.h>
#include <link.h>

#include <utility>

namespace ring::gpu {

SharedLibrary::SharedLibrary(const std::string& path, bool no_load) : path_(path) {
  dlerror();
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | (no_load ? RTLD_NOLOAD : 0));
  if (!handle_) {
    const char* why = dlerror();
    error_ = why ? why : "not loaded";
  }
}

SharedLibrary::SharedLibrary(SharedLibrary&& o) noexcept { *this = std::move(o); }

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& o) noexcept {
  std::swap(handle_, o.handle_);
  std::swap(released_, o.released_);
  std::swap(path_, o.path_);
  std::swap(error_, o.error_);
  std::swap(missing_, o.missing_);
  return *this;
}

SharedLibrary::~SharedLibrary() {
  if (handle_ && !released_) dlclose(handle_);
}

std::string SharedLibrary::file() const {
  link_map* map = nullptr;
  if (handle_ && dlinfo(handle_, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
    return map->l_name;
  return path_;
}

std::string SharedLibrary::missing_text() const {
  std::string s;
  for (const auto& n : missing_) s += (s.empty() ? "" : ", ") + n;
  return s;
}

void* SharedLibrary::optional_symbol(const char* name) { return handle_ ? dlsym(handle_, name) : nullptr; }

void* SharedLibrary::symbol(const char* name) {
  void* fn = handle_ ? dlsym(handle_, name) : nullptr;
  if (!fn) missing_.push_back(name);
  return fn;
}

}  // namespace ring::gpu
