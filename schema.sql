-- result-inbox: the receiver's own schema (initial DDL only).
--
-- Two tables, 17 columns, no foreign keys, no cascades. Run once on an empty,
-- dedicated receiver database with `receiver init`; it refuses to touch tables
-- that already exist. Later changes belong in the receiver's own forward
-- migrations, never in this file: rows written under this schema are a
-- deduplication contract.
--
-- Event and result are stored as exact canonical text (MEDIUMTEXT, binary
-- collation), not as the JSON column type, which would turn numbers into
-- doubles and lose big integers and decimal spelling.
-- Times are UTC, written by the statements with UTC_TIMESTAMP(6).

CREATE TABLE receiver_inbox (
  consumer_name VARCHAR(64) NOT NULL COMMENT '接收方名称（固定的接收用途，重启与扩容复用同一名称）',
  queue_id CHAR(32) NOT NULL COMMENT '事件来源队列ID（32位小写十六进制）',
  event_id CHAR(32) NOT NULL COMMENT '平台事件ID（32位小写十六进制），与接收方名称、队列共同构成去重身份',
  event_digest CHAR(64) NOT NULL COMMENT '规范化事件JSON的SHA-256摘要（64位小写十六进制），用于核对重复投递内容是否一致',
  event_canonical MEDIUMTEXT NOT NULL COMMENT '冻结的规范化事件JSON原文，数字保持原十进制表达',
  applied TINYINT(1) NOT NULL COMMENT '该事件是否推进了任务结果视图（1推进，0为旧版本仅记录）',
  received_at DATETIME(6) NOT NULL COMMENT '接收方收到该事件并插入本行的UTC时间（事务中INSERT语句执行的时刻，不是COMMIT的时刻）',
  PRIMARY KEY (consumer_name, queue_id, event_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='结果Inbox：每个已受理事件一行，只增不删';

CREATE TABLE receiver_task_views (
  consumer_name VARCHAR(64) NOT NULL COMMENT '接收方名称（与Inbox相同的接收范围）',
  queue_id CHAR(32) NOT NULL COMMENT '任务所属队列ID（32位小写十六进制）',
  task_id CHAR(32) NOT NULL COMMENT '平台任务ID（32位小写十六进制）',
  task_version BIGINT UNSIGNED NOT NULL COMMENT '已应用的最高任务版本，只增不减',
  last_event_id CHAR(32) NOT NULL COMMENT '推进到当前版本的事件ID',
  last_state VARCHAR(16) NOT NULL COMMENT '当前版本的任务状态（PENDING、SUCCEEDED、FAILED、CANCELLED、NEEDS_REVIEW）',
  last_result MEDIUMTEXT NULL COMMENT '当前版本的任务结果规范化JSON原文，未提供结果时为NULL',
  applied_events BIGINT UNSIGNED NOT NULL COMMENT '视图实际被推进的次数',
  created_at DATETIME(6) NOT NULL COMMENT '视图首次建立的UTC时间',
  updated_at DATETIME(6) NOT NULL COMMENT '视图最近一次推进的UTC时间',
  PRIMARY KEY (consumer_name, queue_id, task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='任务结果视图：接收方的只读结果模型，不是平台权威任务状态';
