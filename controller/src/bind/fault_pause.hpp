// A test hook for the fault tests (tests/faults): it stops a bind or rollback at a named point so a
// test can kill the controller, an agent or an engine rank exactly there, instead of racing a
// step that lasts milliseconds. Set TANDEM_FAULT_PAUSE to one or more points, separated by commas:
//   before:N          after step N's step.begin is journaled, before it acts
//   after:N           after step N acted, before its step.done is journaled
//   rollback-before:K / rollback-after:K   the same around the K-th rollback task this
//                     controller begins (1-based; tasks the journal has as done are not counted)
// At a point the controller creates <bind dir>/paused (holding the point's name) and waits until
// the file is removed; then it goes on. Unset (every real run), this does nothing.
#pragma once
#include <string>

namespace tandem::ctl {

void fault_pause(const std::string& bind_dir, const std::string& point);

}  // namespace tandem::ctl
