-- result-inbox: the receiver's own schema on PostgreSQL (initial DDL only).
--
-- The same two tables, 17 columns and comments as schema.sql, in
-- PostgreSQL's terms; no foreign keys, no cascades. Run once on an empty,
-- dedicated receiver database; later changes belong in the receiver's own
-- forward migrations, never in this file: rows written under this schema
-- are a deduplication contract.
--
-- Text compares byte by byte (COLLATE "C"), as utf8mb4_bin does on MySQL;
-- the database must be UTF8. Event and result are stored as exact canonical
-- text, not as json/jsonb, which would reorder keys and respell numbers.
-- MySQL's BIGINT UNSIGNED is numeric(20) here where a task version must
-- reach 2^64-1, and bigint with a check where a count can never come near
-- 2^63; TINYINT(1) is smallint holding 0 or 1. Times are UTC without a
-- time zone, written by the statements with
-- (statement_timestamp() AT TIME ZONE 'UTC'), as UTC_TIMESTAMP(6) does on
-- MySQL. Comments are statements of their own (COMMENT ON).

CREATE TABLE receiver_inbox (
  consumer_name varchar(64) COLLATE "C" NOT NULL,
  queue_id char(32) COLLATE "C" NOT NULL,
  event_id char(32) COLLATE "C" NOT NULL,
  event_digest char(64) COLLATE "C" NOT NULL,
  event_canonical text COLLATE "C" NOT NULL,
  applied smallint NOT NULL CHECK (applied IN (0, 1)),
  received_at timestamp(6) without time zone NOT NULL,
  PRIMARY KEY (consumer_name, queue_id, event_id)
);

COMMENT ON TABLE receiver_inbox IS '结果Inbox：每个已受理事件一行，只增不删';
COMMENT ON COLUMN receiver_inbox.consumer_name IS '接收方名称（固定的接收用途，重启与扩容复用同一名称）';
COMMENT ON COLUMN receiver_inbox.queue_id IS '事件来源队列ID（32位小写十六进制）';
COMMENT ON COLUMN receiver_inbox.event_id IS '平台事件ID（32位小写十六进制），与接收方名称、队列共同构成去重身份';
COMMENT ON COLUMN receiver_inbox.event_digest IS '规范化事件JSON的SHA-256摘要（64位小写十六进制），用于核对重复投递内容是否一致';
COMMENT ON COLUMN receiver_inbox.event_canonical IS '冻结的规范化事件JSON原文，数字保持原十进制表达';
COMMENT ON COLUMN receiver_inbox.applied IS '该事件是否推进了任务结果视图（1推进，0为旧版本仅记录）';
COMMENT ON COLUMN receiver_inbox.received_at IS '接收方收到该事件并插入本行的UTC时间（事务中INSERT语句执行的时刻，不是COMMIT的时刻）';

CREATE TABLE receiver_task_views (
  consumer_name varchar(64) COLLATE "C" NOT NULL,
  queue_id char(32) COLLATE "C" NOT NULL,
  task_id char(32) COLLATE "C" NOT NULL,
  task_version numeric(20) NOT NULL CHECK (task_version BETWEEN 0 AND 18446744073709551615),
  last_event_id char(32) COLLATE "C" NOT NULL,
  last_state varchar(16) COLLATE "C" NOT NULL,
  last_result text COLLATE "C" NULL,
  applied_events bigint NOT NULL CHECK (applied_events >= 0),
  created_at timestamp(6) without time zone NOT NULL,
  updated_at timestamp(6) without time zone NOT NULL,
  PRIMARY KEY (consumer_name, queue_id, task_id)
);

COMMENT ON TABLE receiver_task_views IS '任务结果视图：接收方的只读结果模型，不是平台权威任务状态';
COMMENT ON COLUMN receiver_task_views.consumer_name IS '接收方名称（与Inbox相同的接收范围）';
COMMENT ON COLUMN receiver_task_views.queue_id IS '任务所属队列ID（32位小写十六进制）';
COMMENT ON COLUMN receiver_task_views.task_id IS '平台任务ID（32位小写十六进制）';
COMMENT ON COLUMN receiver_task_views.task_version IS '已应用的最高任务版本，只增不减';
COMMENT ON COLUMN receiver_task_views.last_event_id IS '推进到当前版本的事件ID';
COMMENT ON COLUMN receiver_task_views.last_state IS '当前版本的任务状态（PENDING、SUCCEEDED、FAILED、CANCELLED、NEEDS_REVIEW）';
COMMENT ON COLUMN receiver_task_views.last_result IS '当前版本的任务结果规范化JSON原文，未提供结果时为NULL';
COMMENT ON COLUMN receiver_task_views.applied_events IS '视图实际被推进的次数';
COMMENT ON COLUMN receiver_task_views.created_at IS '视图首次建立的UTC时间';
COMMENT ON COLUMN receiver_task_views.updated_at IS '视图最近一次推进的UTC时间';
