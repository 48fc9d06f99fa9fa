-- result-inbox: what `receiver prune` keeps of the rows it deletes, on
-- PostgreSQL: the same table, columns and comments as retention.sql, in the
-- terms of schema.postgres.sql.

CREATE TABLE receiver_pruned (
  consumer_name varchar(64) COLLATE "C" NOT NULL,
  queue_id char(32) COLLATE "C" NOT NULL,
  task_id char(32) COLLATE "C" NOT NULL,
  pruned_events bigint NOT NULL CHECK (pruned_events >= 0),
  pruned_applied bigint NOT NULL CHECK (pruned_applied >= 0),
  pruned_bytes bigint NOT NULL CHECK (pruned_bytes >= 0),
  last_pruned_at timestamp(6) without time zone NOT NULL,
  PRIMARY KEY (consumer_name, queue_id, task_id)
);

COMMENT ON TABLE receiver_pruned IS '清理记录：每个被清理过Inbox行的任务一行，供核对applied_events';
COMMENT ON COLUMN receiver_pruned.consumer_name IS '接收方名称（与Inbox相同的接收范围）';
COMMENT ON COLUMN receiver_pruned.queue_id IS '任务所属队列ID（32位小写十六进制）';
COMMENT ON COLUMN receiver_pruned.task_id IS '平台任务ID（32位小写十六进制）';
COMMENT ON COLUMN receiver_pruned.pruned_events IS '该任务已被清理的Inbox行数';
COMMENT ON COLUMN receiver_pruned.pruned_applied IS '其中推进过视图的行数（applied=1）';
COMMENT ON COLUMN receiver_pruned.pruned_bytes IS '被清理行的规范化事件JSON字节数';
COMMENT ON COLUMN receiver_pruned.last_pruned_at IS '最近一次清理该任务行的UTC时间';
