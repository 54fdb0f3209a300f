package controller

import (
	"strings"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// access is what a call of OperatorService needs and does: the least role
// that may make it (each role may do what the roles below it may), and
// whether it changes the model. A change's audit entry is written with
// its first transaction; a read is recorded only when it is refused.
type access struct {
	role    pb.UserRole
	changes bool
}

const (
	viewer   = pb.UserRole_USER_ROLE_VIEWER
	operator = pb.UserRole_USER_ROLE_OPERATOR
	admin    = pb.UserRole_USER_ROLE_ADMIN
)

// operatorAccess is the one table of the roles: what each OperatorService
// method needs, by its name ("Deploy"). A method it does not name is
// refused to everyone (TestEveryOperatorMethodHasARole fails first).
func operatorAccess(method string) (access, bool) {
	switch method {
	// Reads: the model, its logs, the audit log, who one is, what the
	// controller's binary is.
	// Waiting for the model to settle (ctl wait) is one too: its barrier
	// is a write but changes nothing in the model, and one ctl wait takes
	// several, which would fill the log with waits.
	case "Status", "WatchStatus", "GetConfig", "ShowStatusLog", "Audit", "WhoAmI", "Barrier", "Version",
		"ShowUnit", "ShowMachine":
		return access{role: viewer}, true
	// Rotating one's own credential is every user's.
	case "RotateCredential":
		return access{role: viewer, changes: true}, true
	// Every change of the model.
	case "UploadCharm", "Deploy", "AddUnits", "AddMachines", "AddRelation", "DestroyRelation",
		"DestroyUnit", "DestroyMachine", "DestroyMachines", "DestroyService", "Resolved", "SetConfig",
		"IssueJoinToken":
		return access{role: operator, changes: true}, true
	// Operations: reads are a viewer's; making, approving, rejecting,
	// executing and moving tasks an operator's (who may approve which
	// operation is the action's approvers rule, in state).
	case "ListActions", "ListOperations", "ShowOperation", "ShowTask":
		return access{role: viewer}, true
	case "RunAction", "ApproveOperation", "RejectOperation", "ExecuteOperation",
		"PauseTasks", "ResumeTasks", "StopTasks":
		return access{role: operator, changes: true}, true
	// The operations' task logs.
	case "TaskLogs":
		return access{role: viewer}, true
	// The daemons' log lines (ctl debug-log): whoever may read the
	// status may read them.
	case "DebugLog":
		return access{role: viewer}, true
	// Revisions: the history is a viewer's, a rollback an operator's (a
	// change of the spec, as SetConfig is).
	case "ListRevisions", "ShowRevision":
		return access{role: viewer}, true
	case "RollbackService", "RefreshService":
		return access{role: operator, changes: true}, true
	// Rollouts: the policy and the status are a viewer's to read;
	// changing the policy and steering the rollout an operator's.
	case "GetRolloutPolicy", "RolloutStatus":
		return access{role: viewer}, true
	case "SetRolloutPolicy", "PauseRollout", "ResumeRollout", "PromoteRollout", "AbortRollout":
		return access{role: operator, changes: true}, true
	// A link to log in to the dashboard, as oneself: every user's. What
	// the dashboard shows and does is authorized call by call (CallAs).
	case "DashboardLogin":
		return access{role: viewer, changes: true}, true
	// Manifests: claiming what apply created is part of applying.
	case "ClaimOwnership":
		return access{role: operator, changes: true}, true
	// The users and the controllers.
	case "ListUsers":
		return access{role: admin}, true
	case "AddUser", "RemoveUser", "SetUserRole", "AddController":
		return access{role: admin, changes: true}, true
	}
	return access{}, false
}

// methodName is the last part of a full method name:
// "/lifeline.v1.OperatorService/Deploy" is "Deploy".
func methodName(full string) string { return full[strings.LastIndexByte(full, '/')+1:] }

// allows says whether a user of role may make the call.
func (a access) allows(role pb.UserRole) bool { return role >= a.role && a.role != 0 }

// roleName is role as ctl names it.
func roleName(role pb.UserRole) string { return state.RoleName(role) }

// Allows says whether a user of role may call the OperatorService method
// ("Resolved"), by operatorAccess: what the dashboard offers a user is
// what the call would allow.
func Allows(method string, role pb.UserRole) bool {
	acc, ok := operatorAccess(method)
	return ok && acc.allows(role)
}
