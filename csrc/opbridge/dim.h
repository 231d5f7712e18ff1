// A tensor dimension as a shape rule sees it: a size, or, while PyTorch
// traces with symbolic sizes (torch.compile with dynamic shapes, torch.export
// with Dims, the fake kernels), a symbolic size.
//
// A shape rule is written once, on Dims, as if every size were known:
//
//   const Dim f = x.shape[1];
//   *outputs = {TensorInfo{true, x.dtype, {x.shape[0], f * (f - 1) / 2}}};
//
// With concrete sizes (a kernel's launch, ONNX Runtime, OpenVINO) a Dim is an
// int64_t and its arithmetic is integer arithmetic. With symbolic sizes the
// PyTorch adapter installs DimSymbols for the rule's call: arithmetic on a
// symbolic Dim gives a symbolic Dim computed by PyTorch's own symbolic sizes
// (so the output size stays symbolic: F * (F - 1) / 2, (n - k) / s + 1), a
// comparison is decided by PyTorch the way its own shape functions decide it
// (a guard on the sizes), and reading a symbolic Dim as an int64_t fixes the
// size to the current one (PyTorch specializes it, and an export with a Dim
// for it says so). Division rounds down (sizes are never negative).
//
// An unknown dimension (ONNX Runtime's shape inference of a model whose
// dimension has no value) is a negative size, as before: a rule compares only
// known dimensions and passes unknown ones through.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

namespace opbridge {

class Dim;

enum class DimOp { kAdd, kSub, kMul, kDiv, kMod, kMin, kMax };
enum class DimCompare { kEq, kNe, kLt, kLe, kGt, kGe };

// What an adapter gives a shape rule's symbolic Dims: each symbolic Dim is an
// id the adapter hands out (its own table of symbolic sizes).
class DimSymbols {
 public:
  virtual ~DimSymbols() = default;
  // The id of op(a, b), where at least one of a and b is symbolic.
  virtual int64_t Apply(DimOp op, const Dim& a, const Dim& b) = 0;
  virtual bool Compare(DimCompare op, const Dim& a, const Dim& b) = 0;
  // A symbolic Dim read as a number: fixed to its current size.
  virtual int64_t Specialize(const Dim& a) = 0;
  // For messages: "s0", "2*s1", ...
  virtual std::string Name(const Dim& a) = 0;
};

// The DimSymbols of this thread's current shape rule call (null: none).
inline DimSymbols*& CurrentDimSymbols() {
  static thread_local DimSymbols* current = nullptr;
  return current;
}

// Installs `symbols` for the scope (the PyTorch adapter, around a rule).
class DimSymbolsScope {
 public:
  explicit DimSymbolsScope(DimSymbols* symbols) : previous_(CurrentDimSymbols()) {
    CurrentDimSymbols() = symbols;
  }
  ~DimSymbolsScope() { CurrentDimSymbols() = previous_; }
  DimSymbolsScope(const DimSymbolsScope&) = delete;
  DimSymbolsScope& operator=(const DimSymbolsScope&) = delete;

 private:
  DimSymbols* previous_;
};

class Dim {
 public:
  constexpr Dim() = default;
  template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  constexpr Dim(I size) : size_(static_cast<int64_t>(size)) {}  // NOLINT: implicit on purpose

  // The symbolic size `id` of the current DimSymbols.
  static Dim Symbol(int64_t id) {
    Dim dim;
    dim.symbol_ = id;
    return dim;
  }
  bool symbolic() const { return symbol_ >= 0; }
  int64_t symbol() const { return symbol_; }

  // The size; a symbolic one is fixed to its current size (with no
  // DimSymbols installed: unknown, -1). A `?:` with a Dim on one side takes
  // a Dim on the other: `cond ? shape[0] : Dim(-1)`.
  operator int64_t() const { return Size(); }  // NOLINT: implicit on purpose
  int64_t Size() const {
    if (!symbolic()) return size_;
    DimSymbols* symbols = CurrentDimSymbols();
    return symbols != nullptr ? symbols->Specialize(*this) : -1;
  }

  // The size as messages write it: a number, "?" when unknown, the symbol's
  // name when symbolic.
  std::string ToString() const {
    if (!symbolic()) return size_ < 0 ? std::string("?") : std::to_string(size_);
    DimSymbols* symbols = CurrentDimSymbols();
    return symbols != nullptr ? symbols->Name(*this) : std::string("?");
  }

  static Dim Apply(DimOp op, const Dim& a, const Dim& b) {
    if (!a.symbolic() && !b.symbolic()) return Dim(Concrete(op, a.size_, b.size_));
    DimSymbols* symbols = CurrentDimSymbols();
    if (symbols == nullptr) return Dim(-1);
    return Symbol(symbols->Apply(op, a, b));
  }
  static bool Compare(DimCompare op, const Dim& a, const Dim& b) {
    if (!a.symbolic() && !b.symbolic()) return Concrete(op, a.size_, b.size_);
    DimSymbols* symbols = CurrentDimSymbols();
    if (symbols != nullptr) return symbols->Compare(op, a, b);
    return Concrete(op, static_cast<int64_t>(a), static_cast<int64_t>(b));
  }

  Dim& operator+=(const Dim& other) { return *this = Apply(DimOp::kAdd, *this, other); }
  Dim& operator-=(const Dim& other) { return *this = Apply(DimOp::kSub, *this, other); }
  Dim& operator*=(const Dim& other) { return *this = Apply(DimOp::kMul, *this, other); }
  Dim& operator/=(const Dim& other) { return *this = Apply(DimOp::kDiv, *this, other); }
  Dim& operator%=(const Dim& other) { return *this = Apply(DimOp::kMod, *this, other); }

 private:
  static int64_t Concrete(DimOp op, int64_t a, int64_t b) {
    switch (op) {
      case DimOp::kAdd:
        return a + b;
      case DimOp::kSub:
        return a - b;
      case DimOp::kMul:
        return a * b;
      case DimOp::kDiv:
        return b == 0 ? 0 : a / b;
      case DimOp::kMod:
        return b == 0 ? 0 : a % b;
      case DimOp::kMin:
        return a < b ? a : b;
      case DimOp::kMax:
        return a < b ? b : a;
    }
    return 0;
  }
  static bool Concrete(DimCompare op, int64_t a, int64_t b) {
    switch (op) {
      case DimCompare::kEq:
        return a == b;
      case DimCompare::kNe:
        return a != b;
      case DimCompare::kLt:
        return a < b;
      case DimCompare::kLe:
        return a <= b;
      case DimCompare::kGt:
        return a > b;
      case DimCompare::kGe:
        return a >= b;
    }
    return false;
  }

  int64_t size_ = 0;
  int64_t symbol_ = -1;
};

// The operators take a Dim and a Dim or an integer, either way round (as
// templates, so that they, not the built-in ones on int64_t, are chosen).
template <typename A, typename B>
inline constexpr bool kDimOperands = (std::is_same_v<A, Dim> || std::is_integral_v<A>)&&(
    std::is_same_v<B, Dim> || std::is_integral_v<B>)&&(std::is_same_v<A, Dim> || std::is_same_v<B, Dim>);

#define OPBRIDGE_DIM_ARITHMETIC(SYMBOL, OP)                                        \
  template <typename A, typename B, std::enable_if_t<kDimOperands<A, B>, int> = 0> \
  inline Dim operator SYMBOL(const A& a, const B& b) {                             \
    return Dim::Apply(DimOp::OP, Dim(a), Dim(b));                                  \
  }
OPBRIDGE_DIM_ARITHMETIC(+, kAdd)
OPBRIDGE_DIM_ARITHMETIC(-, kSub)
OPBRIDGE_DIM_ARITHMETIC(*, kMul)
OPBRIDGE_DIM_ARITHMETIC(/, kDiv)
OPBRIDGE_DIM_ARITHMETIC(%, kMod)
#undef OPBRIDGE_DIM_ARITHMETIC

#define OPBRIDGE_DIM_COMPARISON(SYMBOL, OP)                                        \
  template <typename A, typename B, std::enable_if_t<kDimOperands<A, B>, int> = 0> \
  inline bool operator SYMBOL(const A& a, const B& b) {                            \
    return Dim::Compare(DimCompare::OP, Dim(a), Dim(b));                           \
  }
OPBRIDGE_DIM_COMPARISON(==, kEq)
OPBRIDGE_DIM_COMPARISON(!=, kNe)
OPBRIDGE_DIM_COMPARISON(<, kLt)
OPBRIDGE_DIM_COMPARISON(<=, kLe)
OPBRIDGE_DIM_COMPARISON(>, kGt)
OPBRIDGE_DIM_COMPARISON(>=, kGe)
#undef OPBRIDGE_DIM_COMPARISON

inline Dim operator-(const Dim& a) { return Dim::Apply(DimOp::kSub, Dim(0), a); }
inline Dim MinDim(const Dim& a, const Dim& b) { return Dim::Apply(DimOp::kMin, a, b); }
inline Dim MaxDim(const Dim& a, const Dim& b) { return Dim::Apply(DimOp::kMax, a, b); }

// A shape's sizes as int64_t (each symbolic one fixed to its current size).
inline std::vector<int64_t> Sizes(const std::vector<Dim>& shape) {
  return std::vector<int64_t>(shape.begin(), shape.end());
}

// Sizes as a shape.
template <typename Sizes>
std::vector<Dim> DimsOf(const Sizes& sizes) {
  return std::vector<Dim>(std::begin(sizes), std::end(sizes));
}

// A runtime's unknown dimensions (ONNX Runtime's shape inference of a
// dimension with no value) as symbols: a rule's comparisons and reads see
// them as -1 (it compares only known dimensions), arithmetic on one is
// unknown (not the arithmetic of -1), and an output dimension that is one
// of an input's unknown dimensions is known to be that one.
class UnknownDims : public DimSymbols {
 public:
  // The symbol of dimension `dim` of input `input`.
  Dim Input(size_t input, size_t dim) {
    sources_.push_back({input, dim});
    return Dim::Symbol(static_cast<int64_t>(sources_.size() - 1));
  }
  // Whether symbolic `d` is an input's dimension (then which), not computed.
  bool SourceOf(const Dim& d, size_t* input, size_t* dim) const {
    if (!d.symbolic() || static_cast<size_t>(d.symbol()) >= sources_.size()) return false;
    const Source& source = sources_[static_cast<size_t>(d.symbol())];
    if (source.input == kComputed) return false;
    *input = source.input;
    *dim = source.dim;
    return true;
  }

  int64_t Apply(DimOp, const Dim&, const Dim&) override {
    sources_.push_back({kComputed, 0});
    return static_cast<int64_t>(sources_.size() - 1);
  }
  bool Compare(DimCompare op, const Dim& a, const Dim& b) override {
    return Dim::Compare(op, Dim(Value(a)), Dim(Value(b)));
  }
  int64_t Specialize(const Dim&) override { return -1; }
  std::string Name(const Dim&) override { return "?"; }

 private:
  static constexpr size_t kComputed = static_cast<size_t>(-1);
  struct Source {
    size_t input;
    size_t dim;
  };
  static int64_t Value(const Dim& d) { return d.symbolic() ? -1 : static_cast<int64_t>(d); }
  std::vector<Source> sources_;
};

}  // namespace opbridge
