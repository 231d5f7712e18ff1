#include "torch_adapter/backward_rule.h"

#include <string>

#include "opbridge/checks.h"

namespace opbridge::torch_adapter {

Status InferBackwardWithAttrs(const OpSpec& spec, const std::vector<TensorInfo>& infos,
                              const std::vector<AttrValue>& attrs, std::vector<TensorInfo>* outputs) {
  const BackwardSpec& backward = spec.backward;
  for (size_t i = 0; i < backward.inputs.size() && i < infos.size(); ++i) {
    const BackwardInput& input = backward.inputs[i];
    if (input.like < 0) continue;
    const TensorInfo& given = infos[i];
    const TensorInfo& like = infos.at(static_cast<size_t>(input.like));
    bool same = given.dtype == like.dtype && given.shape.size() == like.shape.size();
    for (size_t d = 0; same && d < given.shape.size(); ++d) same = !DimsDiffer(given.shape[d], like.shape[d]);
    if (!same) {
      return ArgError(spec, input.name,
                      "must match " + std::string(backward.inputs[static_cast<size_t>(input.like)].name) +
                          " (" + like.dtype + ", " + FormatShape(like.shape) + "), got " + given.dtype +
                          ", " + FormatShape(given.shape));
    }
  }
  std::vector<TensorInfo> derived;
  if (backward.infer != nullptr) {
    const Status status = backward.infer(infos, attrs, &derived);
    if (!status.ok()) return status;
  }
  outputs->clear();
  outputs->reserve(backward.outputs.size());
  for (size_t o = 0; o < backward.outputs.size(); ++o) {
    const int like = backward.outputs[o].like;
    if (like >= 0) {
      outputs->push_back(infos.at(static_cast<size_t>(like)));
    } else if (o < derived.size()) {
      outputs->push_back(derived[o]);
    } else {
      return Status::Error(spec.TorchName() + ": the backward shape rule gives no output " +
                           std::to_string(o));
    }
  }
  return Status::Ok();
}

}  // namespace opbridge::torch_adapter
