data "aws_partition" "current" {}
data "aws_caller_identity" "current" {}

locals {
  scheduled = var.mode == "scheduled"
  command = concat(["run", "--config", var.config_path],
  local.scheduled ? ["--duration", var.run_duration] : [])
  environment = concat([{ name = "READYPROBE_LOG_FORMAT", value = "json" }],
  local.scheduled ? [{ name = "READYPROBE_PROBER_ID", value = var.prober_id }] : [])
  secrets = var.probe_secret_arn == null ? [] : [{ name = var.probe_secret_env, valueFrom = var.probe_secret_arn }]
  mount_points = concat([{ sourceVolume = "state", containerPath = "/var/lib/readyprobe", readOnly = false }],
  var.config_file_system_id == null ? [] : [{ sourceVolume = "config", containerPath = "/etc/readyprobe", readOnly = true }])
  security_group_ids = concat([aws_security_group.prober.id], var.extra_security_group_ids)
}

resource "aws_cloudwatch_log_group" "prober" {
  #checkov:skip=CKV_AWS_158:Logs and EMF metrics hold no secrets (readyprobe redacts them); CloudWatch Logs encrypts at rest with its own key.
  #checkov:skip=CKV_AWS_338:Retention is the operator's choice (log_retention_days); a prober's logs are not audit records.
  name              = "/readyprobe/${var.service_name}"
  retention_in_days = var.log_retention_days
}

resource "aws_security_group" "prober" {
  name_prefix = "readyprobe-${var.service_name}-"
  description = "readyprobe ${var.service_name}: no ingress; egress to the branches, the VPC resolver and AWS APIs"
  vpc_id      = var.vpc_id

  egress {
    description = "branch endpoints (any port the config names)"
    protocol    = "tcp"
    from_port   = 0
    to_port     = 65535
    cidr_blocks = [var.probe_egress_cidr]
  }
  egress {
    description = "VPC resolver"
    protocol    = "udp"
    from_port   = 53
    to_port     = 53
    cidr_blocks = [var.probe_egress_cidr]
  }
  egress {
    description = "CloudWatch, S3, Secrets Manager, ECR and Logs APIs without VPC endpoints"
    protocol    = "tcp"
    from_port   = 443
    to_port     = 443
    cidr_blocks = ["0.0.0.0/0"]
  }
}

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "task" {
  # PutMetricData has no resource-level permissions; the namespace condition key limits it.
  statement {
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = [var.namespace]
    }
  }
  # One control document per service: <prefix>control-<service>.json.
  statement {
    actions   = ["s3:GetObject", "s3:PutObject"]
    resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.state_bucket}/${var.state_prefix}control-*.json"]
  }
  # Without ListBucket S3 answers the first read of a missing document with 403, not 404.
  statement {
    actions   = ["s3:ListBucket"]
    resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.state_bucket}"]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.state_prefix}*"]
    }
  }
}

resource "aws_iam_role" "task" {
  name_prefix        = "readyprobe-task-"
  description        = "readyprobe ${var.service_name}: publish its metrics, read and write its control document"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

resource "aws_iam_role_policy" "task" {
  name   = "readyprobe"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.task.json
}

resource "aws_iam_role" "execution" {
  name_prefix        = "readyprobe-exec-"
  description        = "readyprobe ${var.service_name}: pull the image, write logs, read the probe secret"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

resource "aws_iam_role_policy" "execution_secret" {
  count = var.probe_secret_arn == null ? 0 : 1
  name  = "probe-secret"
  role  = aws_iam_role.execution.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect   = "Allow"
      Action   = "secretsmanager:GetSecretValue"
      Resource = var.probe_secret_arn
    }]
  })
}

resource "aws_ecs_task_definition" "prober" {
  family                   = "readyprobe-${var.service_name}"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = "256"
  memory                   = "512"
  task_role_arn            = aws_iam_role.task.arn
  execution_role_arn       = aws_iam_role.execution.arn

  runtime_platform {
    cpu_architecture        = "X86_64"
    operating_system_family = "LINUX"
  }

  # Evidence and scratch state (the control document itself lives in S3). The image declares this
  # path a VOLUME owned by its non-root user, so Fargate copies that ownership here.
  volume {
    name = "state"
  }

  dynamic "volume" {
    for_each = var.config_file_system_id == null ? [] : [var.config_file_system_id]
    content {
      name = "config"
      efs_volume_configuration {
        file_system_id     = volume.value
        transit_encryption = "ENABLED"
      }
    }
  }

  container_definitions = jsonencode([{
    name                   = "readyprobe"
    image                  = var.image
    essential              = true
    readonlyRootFilesystem = true
    user                   = "65532:65532"
    # Above --grace (10 s) + 2 s, so the final sync and publish finish after SIGTERM.
    stopTimeout = 20
    command     = local.command
    environment = local.environment
    secrets     = local.secrets
    mountPoints = local.mount_points
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.prober.name
        awslogs-region        = data.aws_region.current.name
        awslogs-stream-prefix = "readyprobe"
      }
    }
  }])
}

resource "aws_ecs_service" "prober" {
  count = local.scheduled ? 0 : 1

  name            = "readyprobe-${var.service_name}"
  cluster         = var.cluster_arn
  task_definition = aws_ecs_task_definition.prober.arn
  launch_type     = "FARGATE"
  desired_count   = var.desired_count
  propagate_tags  = "SERVICE"

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = local.security_group_ids
    assign_public_ip = false
  }
}

data "aws_iam_policy_document" "scheduler_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["scheduler.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

data "aws_iam_policy_document" "scheduler" {
  statement {
    actions   = ["ecs:RunTask"]
    resources = [aws_ecs_task_definition.prober.arn]
    condition {
      test     = "ArnEquals"
      variable = "ecs:cluster"
      values   = [var.cluster_arn]
    }
  }
  statement {
    actions   = ["iam:PassRole"]
    resources = [aws_iam_role.task.arn, aws_iam_role.execution.arn]
    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["ecs-tasks.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "scheduler" {
  count              = local.scheduled ? 1 : 0
  name_prefix        = "readyprobe-sched-"
  description        = "readyprobe ${var.service_name}: EventBridge Scheduler runs the prober task"
  assume_role_policy = data.aws_iam_policy_document.scheduler_assume.json
}

resource "aws_iam_role_policy" "scheduler" {
  count  = local.scheduled ? 1 : 0
  name   = "run-task"
  role   = aws_iam_role.scheduler[0].id
  policy = data.aws_iam_policy_document.scheduler.json
}

resource "aws_scheduler_schedule" "prober" {
  #checkov:skip=CKV_AWS_297:The schedule holds no secret (a task definition ARN, subnets, security groups); the service encrypts it with its own key.
  count = local.scheduled ? 1 : 0

  name                = "readyprobe-${var.service_name}"
  description         = "readyprobe ${var.service_name}: one bounded run per interval, state in S3"
  schedule_expression = var.schedule_expression
  state               = "ENABLED"

  flexible_time_window {
    mode = "OFF"
  }

  target {
    arn      = var.cluster_arn
    role_arn = aws_iam_role.scheduler[0].arn
    retry_policy {
      maximum_retry_attempts = 0
    }
    ecs_parameters {
      task_definition_arn = aws_ecs_task_definition.prober.arn
      task_count          = 1
      launch_type         = "FARGATE"
      network_configuration {
        subnets          = var.subnet_ids
        security_groups  = local.security_group_ids
        assign_public_ip = false
      }
    }
  }
}
