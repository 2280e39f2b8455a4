// da3-edge's ExecuTorch runner: a C ABI over ExecuTorch's Program and Method, for ctypes.
//
// Built at install time (edge/etrunner/install.py) against the runtime libraries and
// headers of the pinned executorch wheel, which link no libtorch. Python calls it with
// ctypes: no CPython API here, so one build serves every Python version.
//
// The program file is memory-mapped (MmapDataLoader). The memory ExecuTorch planned for
// a method (its intermediates, sized at the export's upper bounds) is anonymous mmap
// here: pages the kernel hands out zeroed when first touched, so the resident cost is
// what a run at the actual sizes touches, not the bound. (extension::Module allocates
// it as zero-filled vectors: all of it resident at open.)
//
// Inputs are numpy buffers wrapped in place (TensorImpl over the caller's memory);
// ExecuTorch copies an input only if the program planned memory for it. Outputs are
// read where the program left them, valid until the next run of the same program.
// Every call returns 0 on success or an ExecuTorch error code, with the message in
// da3et_error() (per thread).

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <sys/mman.h>

#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/executor/memory_manager.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

#ifndef DA3ET_EXECUTORCH_VERSION
#error "build with -DDA3ET_EXECUTORCH_VERSION=\"x.y.z\" (the wheel's version)"
#endif

// The wheel ships the thread pool's library but not its header: the two members used
// here, as the library defines them (executorch/extension/threadpool/threadpool.h).
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  size_t get_thread_count() const;
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;
using executorch::extension::MallocMemoryAllocator;
using executorch::extension::MmapDataLoader;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Method;
using executorch::runtime::Span;

constexpr int kAbi = 3;  // bump when a signature below changes
constexpr int kMaxRank = 8;

thread_local std::string last_error;
std::atomic<int> open_programs{0};  // the pool may be resized only while this is 0

int fail(Error code, const std::string& what) {
  last_error = what + " (" + executorch::runtime::to_string(code) + ")";
  return static_cast<int>(code) ? static_cast<int>(code) : 1;
}

// The dtype codes the Python side uses (edge/etrunner/__init__.py: DTYPES).
bool to_scalar(int code, ScalarType* out) {
  switch (code) {
    case 0: *out = ScalarType::Float; return true;
    case 1: *out = ScalarType::Byte; return true;
    case 2: *out = ScalarType::Int; return true;
    case 3: *out = ScalarType::Long; return true;
    case 4: *out = ScalarType::Half; return true;
    default: return false;
  }
}

int from_scalar(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return 0;
    case ScalarType::Byte: return 1;
    case ScalarType::Int: return 2;
    case ScalarType::Long: return 3;
    case ScalarType::Half: return 4;
    default: return -1 - static_cast<int>(t);  // named in the error on the Python side
  }
}

// Planned memory as anonymous mappings: zero pages until touched.
struct Mapping {
  void* data = MAP_FAILED;
  size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data != MAP_FAILED) munmap(data, size);
  }
};

struct Program {
  std::unique_ptr<MmapDataLoader> loader;
  std::unique_ptr<executorch::runtime::Program> program;
  std::vector<std::unique_ptr<Mapping>> mappings;
  std::vector<Span<uint8_t>> spans;
  int64_t planned_bytes = 0;
  std::unique_ptr<HierarchicalAllocator> planned;
  MallocMemoryAllocator method_allocator;  // the method's own bookkeeping
  MallocMemoryAllocator temp_allocator;    // kernels' and delegates' scratch
  std::unique_ptr<MemoryManager> memory;
  std::unique_ptr<Method> method;
};

}  // namespace

extern "C" {

const char* da3et_error() { return last_error.c_str(); }
int da3et_abi() { return kAbi; }
const char* da3et_executorch_version() { return DA3ET_EXECUTORCH_VERSION; }

int da3et_set_threads(int threads) {
  auto* pool = executorch::extension::threadpool::get_threadpool();
  if (pool == nullptr) return fail(Error::Internal, "no ExecuTorch thread pool");
  // XNNPACK keeps the pool's pointer in every loaded method: resizing it then crashed.
  if (open_programs.load() != 0) {
    return fail(Error::InvalidState, "programs are open: set the thread count first");
  }
  if (threads > 0 && !pool->_unsafe_reset_threadpool(static_cast<uint32_t>(threads))) {
    return fail(Error::Internal, "cannot resize the ExecuTorch thread pool");
  }
  return 0;
}

int da3et_threads() {
  auto* pool = executorch::extension::threadpool::get_threadpool();
  return pool ? static_cast<int>(pool->get_thread_count()) : 0;
}

// Open a .pte (memory-mapped) and load its "forward" method.
int da3et_open(const char* path, void** handle) {
  *handle = nullptr;
  static const bool initialised = [] {
    executorch::runtime::runtime_init();
    return true;
  }();
  (void)initialised;
  try {
    auto program = std::make_unique<Program>();
    auto loader = MmapDataLoader::from(path, MmapDataLoader::MlockConfig::NoMlock);
    if (!loader.ok()) return fail(loader.error(), std::string("cannot open ") + path);
    program->loader = std::make_unique<MmapDataLoader>(std::move(*loader));
    auto loaded = executorch::runtime::Program::load(program->loader.get());
    if (!loaded.ok()) return fail(loaded.error(), std::string("cannot load ") + path);
    program->program = std::make_unique<executorch::runtime::Program>(std::move(*loaded));
    auto meta = program->program->method_meta("forward");
    if (!meta.ok()) return fail(meta.error(), std::string("no forward method in ") + path);
    for (size_t i = 0; i < meta->num_memory_planned_buffers(); ++i) {
      auto size = meta->memory_planned_buffer_size(i);
      if (!size.ok()) return fail(size.error(), "planned buffer size");
      auto mapping = std::make_unique<Mapping>();
      mapping->size = static_cast<size_t>(*size);
      if (mapping->size > 0) {
        mapping->data = mmap(nullptr, mapping->size, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mapping->data == MAP_FAILED) {
          return fail(Error::MemoryAllocationFailed, "cannot map planned memory");
        }
        // Huge pages where the kernel offers them (THP "madvise" or "always"): a run
        // after da3et_release touches its pages anew, and 4 KiB faults made that ~15 ms
        // of a 20 ms post stage here (1200x1600); 2 MiB ones ~2 ms. Advice only: a
        // kernel without THP ignores it.
        madvise(mapping->data, mapping->size, MADV_HUGEPAGE);
      }
      program->planned_bytes += *size;
      uint8_t* base = mapping->size ? static_cast<uint8_t*>(mapping->data) : nullptr;
      program->spans.emplace_back(base, mapping->size);
      program->mappings.push_back(std::move(mapping));
    }
    program->planned = std::make_unique<HierarchicalAllocator>(
        Span<Span<uint8_t>>(program->spans.data(), program->spans.size()));
    program->memory = std::make_unique<MemoryManager>(
        &program->method_allocator, program->planned.get(), &program->temp_allocator);
    auto method = program->program->load_method("forward", program->memory.get());
    if (!method.ok()) return fail(method.error(), std::string("cannot load ") + path);
    program->method = std::make_unique<Method>(std::move(*method));
    *handle = program.release();
    ++open_programs;
    return 0;
  } catch (const std::exception& exc) {
    return fail(Error::Internal, std::string("cannot load ") + path + ": " + exc.what());
  }
}

void da3et_close(void* handle) {
  if (handle == nullptr) return;
  delete static_cast<Program*>(handle);
  --open_programs;
}

// What forward takes and gives: counts, then one tensor's dtype code and rank, and its
// sizes (as exported: the upper bounds of dynamic dimensions) into `sizes`.
int da3et_arity(void* handle, int* inputs, int* outputs) {
  auto* program = static_cast<Program*>(handle);
  auto meta = program->program->method_meta("forward");
  if (!meta.ok()) return fail(meta.error(), "no forward method");
  *inputs = static_cast<int>(meta->num_inputs());
  *outputs = static_cast<int>(meta->num_outputs());
  return 0;
}

int da3et_tensor_meta(void* handle, int is_output, int index, int* dtype, int* rank,
                      int64_t* sizes) {
  auto* program = static_cast<Program*>(handle);
  auto meta = program->program->method_meta("forward");
  if (!meta.ok()) return fail(meta.error(), "no forward method");
  auto info = is_output ? meta->output_tensor_meta(index) : meta->input_tensor_meta(index);
  if (!info.ok()) return fail(info.error(), "not a tensor: " + std::to_string(index));
  auto dims = info->sizes();
  if (dims.size() > kMaxRank) return fail(Error::NotSupported, "rank over 8");
  *dtype = from_scalar(info->scalar_type());
  *rank = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) sizes[i] = dims[i];
  return 0;
}

// Bytes of the memory ExecuTorch planned for forward (its intermediates at the export's
// bounds; mapped at open, resident only as runs touch it).
int da3et_planned_bytes(void* handle, int64_t* bytes) {
  *bytes = static_cast<Program*>(handle)->planned_bytes;
  return 0;
}

// Give the planned memory's pages back to the kernel (they read as zeros again, and a
// run touches them anew): between runs, so a program's intermediates are not resident
// while other work (the core) reaches its peak. Outputs read before are invalid after.
int da3et_release(void* handle) {
  auto* program = static_cast<Program*>(handle);
  for (auto& mapping : program->mappings) {
    if (mapping->size && madvise(mapping->data, mapping->size, MADV_DONTNEED) != 0) {
      return fail(Error::Internal, "madvise failed");
    }
  }
  return 0;
}

// Run forward on `count` contiguous tensors: data[i] with dtypes[i], ranks[i] and
// sizes[i * 8 ...]. Outputs stay in the program (da3et_output) until the next run.
int da3et_run(void* handle, int count, void* const* data, const int* dtypes,
              const int* ranks, const int64_t* sizes) {
  auto* program = static_cast<Program*>(handle);
  if (count < 0 || count > 16) return fail(Error::InvalidArgument, "too many inputs");
  std::vector<std::vector<TensorImpl::SizesType>> shape(count);
  std::vector<std::vector<TensorImpl::DimOrderType>> order(count);
  std::vector<std::vector<TensorImpl::StridesType>> strides(count);
  std::vector<std::unique_ptr<TensorImpl>> impls;
  std::vector<EValue> inputs;
  impls.reserve(count);
  inputs.reserve(count);
  for (int i = 0; i < count; ++i) {
    ScalarType type;
    if (!to_scalar(dtypes[i], &type)) {
      return fail(Error::InvalidArgument, "input " + std::to_string(i) + ": unknown dtype");
    }
    int rank = ranks[i];
    if (rank < 0 || rank > kMaxRank) return fail(Error::InvalidArgument, "bad rank");
    shape[i].resize(rank);
    order[i].resize(rank);
    strides[i].resize(rank);
    TensorImpl::StridesType stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      shape[i][d] = static_cast<TensorImpl::SizesType>(sizes[i * kMaxRank + d]);
      order[i][d] = static_cast<TensorImpl::DimOrderType>(d);
      strides[i][d] = stride;
      stride *= shape[i][d];
    }
    impls.push_back(std::make_unique<TensorImpl>(
        type, rank, shape[i].data(), data[i], order[i].data(), strides[i].data(),
        executorch::runtime::TensorShapeDynamism::STATIC));
    inputs.emplace_back(Tensor(impls.back().get()));
  }
  try {
    for (int i = 0; i < count; ++i) {
      Error err = program->method->set_input(inputs[i], static_cast<size_t>(i));
      if (err != Error::Ok) return fail(err, "input " + std::to_string(i));
    }
    Error err = program->method->execute();
    // Kernels' and delegates' scratch lives for one run: a MallocMemoryAllocator keeps
    // every allocation until reset, so without this each run grew the process.
    program->temp_allocator.reset();
    if (err != Error::Ok) return fail(err, "forward failed");
  } catch (const std::exception& exc) {
    return fail(Error::Internal, std::string("forward failed: ") + exc.what());
  }
  return 0;
}

// The last run's output `index`: its data pointer, dtype code, rank and sizes.
int da3et_output(void* handle, int index, void** data, int* dtype, int* rank,
                 int64_t* sizes) {
  auto* program = static_cast<Program*>(handle);
  if (index < 0 || static_cast<size_t>(index) >= program->method->outputs_size()) {
    return fail(Error::InvalidArgument, "no output " + std::to_string(index));
  }
  const EValue& value = program->method->get_output(static_cast<size_t>(index));
  if (!value.isTensor()) return fail(Error::InvalidType, "output is not a tensor");
  const Tensor& tensor = value.toTensor();
  if (tensor.dim() > kMaxRank) return fail(Error::NotSupported, "rank over 8");
  *data = tensor.mutable_data_ptr();
  *dtype = from_scalar(tensor.scalar_type());
  *rank = static_cast<int>(tensor.dim());
  for (ssize_t d = 0; d < tensor.dim(); ++d) sizes[d] = tensor.size(d);
  return 0;
}

}  // extern "C"
