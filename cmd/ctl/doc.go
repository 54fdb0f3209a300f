// Command ctl is the operator's client of a Lifeline controller: it starts
// and stops a local controller (bootstrap, kill-controller), and calls the
// controller's OperatorService for everything else (status, deploy,
// add-unit, add-machine, add-relation, destroy-*, resolved, config,
// revisions, rollback, set-rollout, rollout, plan, wait, show-status-log, add-controller, and the
// operations: actions, run,
// operations, show-operation, show-task, approve, reject, execute, pause,
// resume, stop).
//
// It owns the command line: flags, arguments, how refusals and the model's
// status are shown, and the exit statuses:
//
//	0  success
//	1  the controller refused (its one-sentence reason is printed as
//	   "ctl: <reason>"), the controller could not be reached, or the work
//	   failed (wait timed out, units in error, an operation's parameters
//	   invalid, run --wait ended without every task done, a task a verb
//	   could not move)
//	2  the command was called wrongly (bad flags or arguments)
//
// It must not reach etcd or decide the model's rules: the controller
// decides, ctl asks and reports.
//
// # Files ctl keeps
//
// The client config (controller addresses, CA, admin credential) is at
// $LIFELINE_CONFIG when set, otherwise lifeline/client.json under the
// user's config directory; the controller writes it on first start.
// ctl bootstrap records the controller it started in a JSON file next to
// the client config, named after it (client.json → client.controller.json):
//
//	{"data_dir": "...", "api_addr": "127.0.0.1:17070", "provider": "manual", "lifelined": "..."}
//
// so that ctl kill-controller finds the data directory, and in it the
// controller's pid file (controller.pid) and log (controller.log), and
// that ctl bootstrap, given the same client config, finds the controller
// stopped with its data kept (kill-controller --keep-data) and starts it
// again there rather than a new one elsewhere. The
// default data directory is $XDG_DATA_HOME/lifeline/controller, or
// ~/.local/share/lifeline/controller. The controller listens on
// 127.0.0.1:--api-port (17070) and serves /metrics on the next port.
package main
