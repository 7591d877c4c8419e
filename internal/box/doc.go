// Package box defines what every backend shares: the Spec of one execution, the
// Result it produces, the Status vocabulary and the Backend interface. It makes no
// system calls; the backends live in the sub-packages (native today).
//
// # Contract
//
// A backend starts an isolated box with the Spec's limits, runs the code in it,
// streams its output, and destroys the box completely before Run returns: no process,
// cgroup, mount or directory of the box survives. Program outcomes (a non-zero exit, a
// timeout, an OOM kill, an output flood) are Results, not errors; an error means moat's
// own machinery failed.
package box
