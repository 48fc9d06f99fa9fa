-- result-inbox: the receiver's outbox, the effects an inner service records
-- in the inbox's transaction, to be sent after COMMIT.
--
-- A table beside the two of schema.sql, which it leaves unchanged, and
-- created only when asked: `receiver init --outbox` with the other two, or
-- `receiver init --keep-existing --outbox` beside them. One row per effect;
-- no foreign keys. The runtime account records and updates rows (SELECT,
-- INSERT, UPDATE) and never deletes one.
--
-- effect_id is derived from the inbox identity (consumer_name, queue_id,
-- event_id), the target and the effect's key (docs/outbox.md), so an event
-- applied again can never make a second id for the same effect. seq orders
-- the effects of one ordering key (per target) in the order they were
-- recorded, and is the clustered key: InnoDB appends each new row at the
-- end of the table instead of into a page the random effect id picks (a
-- unique key of its own), about a fifth less redo per recorded effect.
-- The body is stored as exact bytes (MEDIUMBLOB); headers as a canonical
-- JSON object of name to value. Times are UTC, written by the statements
-- with UTC_TIMESTAMP(6).

CREATE TABLE receiver_outbox (
  seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT '记录顺序（单调递增）：同一目标、同一排序键的效果按此顺序发送',
  effect_id CHAR(32) NOT NULL COMMENT '效果ID（32位小写十六进制）：由Inbox身份、目标名称与效果键派生，重放或重新应用事件不会产生第二个ID',
  consumer_name VARCHAR(64) NOT NULL COMMENT '记录该效果的接收方名称（与Inbox相同的接收范围）',
  queue_id CHAR(32) NOT NULL COMMENT '产生该效果的事件所属队列ID（32位小写十六进制）',
  event_id CHAR(32) NOT NULL COMMENT '产生该效果的平台事件ID（32位小写十六进制）',
  target VARCHAR(64) NOT NULL COMMENT '发送目标名称（如某个webhook端点），由中继按名称找到目标',
  effect_key VARCHAR(255) NOT NULL COMMENT '效果键：同一事件、同一目标下唯一',
  ordering_key VARCHAR(255) NOT NULL COMMENT '排序键：同一目标下排序键相同的效果按记录顺序逐个发送，默认等于效果键',
  body MEDIUMBLOB NOT NULL COMMENT '要发送的原始字节，逐字节保存',
  headers TEXT NOT NULL COMMENT '要发送的头部：名称到值的规范化JSON对象（名称小写、按名称排序）',
  traceparent VARCHAR(255) NULL COMMENT '投递携带的W3C追踪上下文（traceparent），没有时为NULL',
  state VARCHAR(8) NOT NULL COMMENT '状态：pending待发送，sent已发送，dead已放弃（待运维重放）' CHECK (state IN ('pending', 'sent', 'dead')),
  attempts INT UNSIGNED NOT NULL COMMENT '已尝试发送的次数',
  next_attempt_at DATETIME(6) NOT NULL COMMENT '最早可以再次尝试发送的UTC时间',
  lease_owner VARCHAR(128) NULL COMMENT '持有租约的中继名称，未被领取时为NULL',
  lease_until DATETIME(6) NULL COMMENT '租约到期的UTC时间，到期后其他中继可以重新领取',
  last_result VARCHAR(128) NULL COMMENT '最近一次尝试的结果（状态码或错误类别），尚未尝试时为NULL',
  created_at DATETIME(6) NOT NULL COMMENT '效果被记录的UTC时间（Inbox事务中INSERT语句执行的时刻，不是COMMIT的时刻）',
  sent_at DATETIME(6) NULL COMMENT '确认发送成功的UTC时间，未发送时为NULL',
  PRIMARY KEY (seq),
  UNIQUE KEY receiver_outbox_effect (effect_id),
  KEY receiver_outbox_due (state, next_attempt_at, seq),
  KEY receiver_outbox_ordering (target, ordering_key, state, seq),
  KEY receiver_outbox_event (consumer_name, queue_id, event_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='发件箱：在Inbox事务中记录、COMMIT之后由中继发送的外部效果，每个效果一行';
