// execd/power_off: execd's last act as PID 1 of a whole (virtual) machine.
// The kernel panics when init exits, so execd powers the machine off
// instead; as PID 1 of a container it just exits.
#pragma once

namespace execd {

// Powers the machine off if execd is the initial PID namespace's PID 1;
// returns otherwise (and if the power-off fails, after logging it).
void power_off_if_machine_init();

}  // namespace execd
