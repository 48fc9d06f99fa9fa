-- result-inbox: what `receiver prune` keeps of the rows it deletes.
--
-- A third table beside the two of schema.sql, which it leaves unchanged:
-- one row per task whose inbox rows were pruned, counting them, so that
-- `receiver verify` can still check a view's applied_events against the
-- inbox (rows present plus rows pruned). A plain `receiver init` does not
-- create it: `receiver init --retention` creates it with the other two, and
-- on a database that has them `receiver init --keep-existing --retention`
-- adds it and touches nothing else. Written only by the prune account, in
-- the same transaction as the DELETE it counts; the runtime account never
-- writes it.

CREATE TABLE receiver_pruned (
  consumer_name VARCHAR(64) NOT NULL COMMENT '接收方名称（与Inbox相同的接收范围）',
  queue_id CHAR(32) NOT NULL COMMENT '任务所属队列ID（32位小写十六进制）',
  task_id CHAR(32) NOT NULL COMMENT '平台任务ID（32位小写十六进制）',
  pruned_events BIGINT UNSIGNED NOT NULL COMMENT '该任务已被清理的Inbox行数',
  pruned_applied BIGINT UNSIGNED NOT NULL COMMENT '其中推进过视图的行数（applied=1）',
  pruned_bytes BIGINT UNSIGNED NOT NULL COMMENT '被清理行的规范化事件JSON字节数',
  last_pruned_at DATETIME(6) NOT NULL COMMENT '最近一次清理该任务行的UTC时间',
  PRIMARY KEY (consumer_name, queue_id, task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='清理记录：每个被清理过Inbox行的任务一行，供核对applied_events';
