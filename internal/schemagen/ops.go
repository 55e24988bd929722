package main

import (
	"reflect"

	"github.com/avfs/avfs/messages"
)

// opSpec is one op of the contract: the type of its args object (nil: it
// takes none) and of its result object, as the handler and the worker's
// runner bind them.
type opSpec struct {
	Op     messages.Op
	Args   reflect.Type
	Result reflect.Type
}

func typ[T any]() reflect.Type { return reflect.TypeFor[T]() }

// ops is every op, in the order of messages/ops.go. Package messages has
// no list of its ops, so this table is the list; TestOpTableCoversMessages
// compares it with the Op constants declared in messages.
var ops = []opSpec{
	{messages.OpVaultCreate, typ[messages.VaultCreateArgs](), typ[messages.VaultResult]()},
	{messages.OpVaultList, nil, typ[messages.VaultListResult]()},
	{messages.OpVaultInfo, nil, typ[messages.VaultResult]()},
	{messages.OpVaultFork, typ[messages.VaultForkArgs](), typ[messages.ForkResult]()},
	{messages.OpVaultMerge, typ[messages.VaultMergeArgs](), typ[messages.MergeResult]()},
	{messages.OpVaultPush, typ[messages.PushArgs](), typ[messages.Head]()},
	{messages.OpVaultDelete, typ[messages.VaultDeleteArgs](), typ[messages.DeletedResult]()},
	{messages.OpVaultExport, typ[messages.VaultTransferArgs](), typ[messages.TransferResult]()},
	{messages.OpVaultImport, typ[messages.VaultTransferArgs](), typ[messages.TransferResult]()},

	{messages.OpWrite, typ[messages.WriteArgs](), typ[messages.WriteResult]()},
	{messages.OpWriteBatch, typ[messages.WriteBatchArgs](), typ[messages.BatchResult]()},
	{messages.OpCat, typ[messages.CatArgs](), typ[messages.CatResult]()},
	{messages.OpLs, typ[messages.LsArgs](), typ[messages.LsResult]()},
	{messages.OpStat, typ[messages.PathArgs](), typ[messages.Entry]()},
	{messages.OpMkdir, typ[messages.MkdirArgs](), typ[messages.PathResult]()},
	{messages.OpRm, typ[messages.RmArgs](), typ[messages.PathResult]()},
	{messages.OpMv, typ[messages.MoveArgs](), typ[messages.PathResult]()},
	{messages.OpCp, typ[messages.MoveArgs](), typ[messages.PathResult]()},
	{messages.OpLn, typ[messages.MoveArgs](), typ[messages.PathResult]()},
	{messages.OpReadTree, typ[messages.ReadTreeArgs](), typ[messages.ReadTreeResult]()},
	{messages.OpImportDir, typ[messages.HostDirArgs](), typ[messages.BatchResult]()},
	{messages.OpExportDir, typ[messages.HostDirArgs](), typ[messages.BatchResult]()},
	{messages.OpGrep, typ[messages.GrepArgs](), typ[messages.GrepResult]()},
	{messages.OpFind, typ[messages.FindArgs](), typ[messages.FindResult]()},

	{messages.OpSearch, typ[messages.SearchArgs](), typ[messages.SearchResult]()},
	{messages.OpReindex, nil, typ[messages.ReindexResult]()},

	{messages.OpLabel, typ[messages.LabelArgs](), typ[messages.LabelsResult]()},
	{messages.OpLabelsGet, typ[messages.PathArgs](), typ[messages.LabelsResult]()},

	{messages.OpCheckpointSave, typ[messages.CheckpointArgs](), typ[messages.CheckpointResult]()},
	{messages.OpCheckpointList, nil, typ[messages.CheckpointListResult]()},
	{messages.OpCheckpointRestore, typ[messages.CheckpointArgs](), typ[messages.RestoreResult]()},
	{messages.OpCheckpointDelete, typ[messages.CheckpointArgs](), typ[messages.DeletedResult]()},
	{messages.OpCheckpointDiff, typ[messages.DiffArgs](), typ[messages.DiffResult]()},

	{messages.OpHistoryLog, typ[messages.HistoryLogArgs](), typ[messages.HistoryLogResult]()},
	{messages.OpHistoryCat, typ[messages.HistoryVersionArgs](), typ[messages.HistoryCatResult]()},
	{messages.OpHistoryCheckout, typ[messages.HistoryVersionArgs](), typ[messages.HistoryWriteResult]()},
	{messages.OpHistoryRevert, typ[messages.HistoryVersionArgs](), typ[messages.HistoryWriteResult]()},
	{messages.OpHistoryDiff, typ[messages.HistoryDiffArgs](), typ[messages.HistoryDiffResult]()},
	{messages.OpHistoryPrune, typ[messages.HistoryPruneArgs](), typ[messages.HistoryPruneResult]()},
	{messages.OpHistoryGet, nil, typ[messages.HistoryResult]()},
	{messages.OpHistorySet, typ[messages.HistorySetArgs](), typ[messages.HistoryResult]()},

	{messages.OpQuotaGet, nil, typ[messages.QuotaResult]()},
	{messages.OpQuotaSet, typ[messages.QuotaSetArgs](), typ[messages.QuotaResult]()},
	{messages.OpAudit, typ[messages.AuditArgs](), typ[messages.AuditResult]()},
	{messages.OpAuditClear, typ[messages.AuditClearArgs](), typ[messages.AuditClearResult]()},

	{messages.OpVaultSettings, nil, typ[messages.VaultSettingsResult]()},
	{messages.OpVaultSet, typ[messages.VaultSetArgs](), typ[messages.VaultSettingsResult]()},
	{messages.OpStats, nil, typ[messages.StatsResult]()},
	{messages.OpCompact, nil, typ[messages.CompactResult]()},
	{messages.OpMaintain, nil, typ[messages.MaintainResult]()},

	{messages.OpExec, typ[messages.ExecArgs](), typ[messages.Envelope]()},
	{messages.OpApprovalList, nil, typ[messages.ApprovalListResult]()},
	{messages.OpApprovalGrant, typ[messages.ApprovalArgs](), typ[messages.ApprovalResult]()},
	{messages.OpApprovalDeny, typ[messages.ApprovalArgs](), typ[messages.ApprovalResult]()},
	{messages.OpApprovalShow, typ[messages.ApprovalArgs](), typ[messages.ApprovalResult]()},
	{messages.OpPolicyCheck, typ[messages.PolicyCheckArgs](), typ[messages.PolicyCheckResult]()},
	{messages.OpRunStart, typ[messages.ExecArgs](), typ[messages.RunResult]()},
	{messages.OpRunStatus, typ[messages.RunArgs](), typ[messages.RunResult]()},
	{messages.OpRunLogs, typ[messages.RunLogsArgs](), typ[messages.RunLogsResult]()},
	{messages.OpRunKill, typ[messages.RunArgs](), typ[messages.RunResult]()},
	{messages.OpRunList, nil, typ[messages.RunListResult]()},

	{messages.OpTransferOpen, nil, typ[messages.TransferOpenResult]()},

	{messages.OpMountStart, typ[messages.MountArgs](), typ[messages.MountResult]()},
	{messages.OpMountStop, typ[messages.MountArgs](), typ[messages.MountResult]()},
}

// scope says what the vault token of an op's subject names.
func scope(op messages.Op) string {
	switch {
	case op.NeedsVault():
		return "vault"
	case op == messages.OpVaultCreate || op == messages.OpVaultImport:
		return "new vault"
	default:
		return "namespace"
	}
}

// vaultToken is the subject's vault token as written in the docs.
func vaultToken(op messages.Op) string {
	if scope(op) == "namespace" {
		return messages.NoVault
	}
	return "<vault>"
}

// fleetTypes are the values of the fleet's KV buckets, documented for
// operators and other dispatcher implementations.
// (VaultInfo and Approval are the values of the catalogs.)
var fleetTypes = []reflect.Type{typ[messages.Owner](), typ[messages.Member](), typ[messages.Head](), typ[messages.VaultInfo](), typ[messages.Approval](), typ[messages.ChangeEntry]()}

// names renames Go types whose contract name differs (docs/envelope.md).
var names = map[string]string{"Envelope": "ExecutionEnvelope"}

// noArgs is the file of ops that take no args object.
const noArgs = "NoArgs"
