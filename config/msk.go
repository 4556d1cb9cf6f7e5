package config

import (
	"context"
	"errors"
	"fmt"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
)

// ErrAWSCredentials is wrapped by every failure to get AWS credentials for
// AWS_MSK_IAM.
var ErrAWSCredentials = errors.New("config: AWS_MSK_IAM credentials")

// mskIAM returns the AWS_MSK_IAM mechanism. Credentials come from the AWS
// SDK's default chain, in its order: the AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN variables; the shared
// config and credentials files (AWS_PROFILE); web identity
// (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, as EKS's IAM roles for
// service accounts set); the container endpoint (ECS task roles, EKS Pod
// Identity); the EC2 instance role. They are cached and renewed before
// they expire. The region is read from each broker's host name.
func mskIAM(ctx context.Context) (sasl.Mechanism, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAWSCredentials, err)
	}
	return aws.ManagedStreamingIAM(func(ctx context.Context) (aws.Auth, error) {
		c, err := cfg.Credentials.Retrieve(ctx)
		if err != nil {
			return aws.Auth{}, fmt.Errorf("%w: %w", ErrAWSCredentials, err)
		}
		return aws.Auth{AccessKey: c.AccessKeyID, SecretKey: c.SecretAccessKey, SessionToken: c.SessionToken, UserAgent: "kdelay"}, nil
	}), nil
}
