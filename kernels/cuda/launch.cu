// The switch for programmatic dependent launches (launch.hpp).
#include <atomic>

#include "tandem/kernels/launch.hpp"

namespace tandem::kernels {
namespace {
std::atomic<bool> programmatic{true};
}  // namespace

void set_programmatic_launch(bool on) { programmatic.store(on); }
bool programmatic_launch() { return programmatic.load(); }

}  // namespace tandem::kernels
