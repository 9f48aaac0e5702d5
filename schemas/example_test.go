package schemas_test

import (
	"fmt"

	"github.com/creditflow/creditflow/schemas"
)

func Example() {
	reward := 1.0
	tr := &schemas.Trajectory{
		TrajectoryID: "t-1", PromptID: "p-1", GroupSize: 5,
		Prompt: []int32{101, 102},
		Turns: []schemas.Turn{
			{Kind: schemas.KindSearch, Action: []int32{11, 12}, Observation: []int32{21}},
			{Kind: schemas.KindAnswer, Action: []int32{31}},
		},
		Reward: &reward,
	}
	codec := schemas.Trajectories()
	b, err := codec.Encode(tr)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("% x | %s\n", b[:2], schemas.SchemaOf(b))

	got, err := codec.Decode(b)
	if err != nil {
		fmt.Println(schemas.ReasonOf(err), err)
		return
	}
	fmt.Println(got.TrajectoryID, len(got.Turns), schemas.ValidateTrajectory(got, schemas.DefaultLimits()))

	_, err = schemas.Samples().Decode(b)
	fmt.Println(schemas.ReasonOf(err))

	got.GoldTarget, got.GoldSpan = []int32{1, 2, 3}, [2]int32{2, 2}
	fmt.Println(schemas.ReasonOf(schemas.ValidateTrajectory(got, schemas.DefaultLimits())))
	// Output:
	// c3 01 | io.creditflow.v1.Trajectory
	// t-1 2 <nil>
	// unknown_schema
	// bad_span
}
