output "role_arn" {
  description = "The config's role_arn ([publish.cloudwatch] or a service's publish), and the root module's publish_role_arns."
  value       = aws_iam_role.publish.arn
}

output "trust_policy" {
  description = "The role's trust policy (JSON)."
  value       = data.aws_iam_policy_document.trust.json
}

output "policies" {
  description = "The role's policies (JSON), by name."
  value       = { publish = data.aws_iam_policy_document.publish.json, read = data.aws_iam_policy_document.read.json }
}
